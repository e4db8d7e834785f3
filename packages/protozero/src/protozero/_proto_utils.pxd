import cython


@cython.locals(p=Py_ssize_t)
cdef Py_ssize_t store_varint(unsigned char[::1] view, Py_ssize_t p, unsigned long long value) noexcept
@cython.locals(last=Py_ssize_t)
cdef Py_ssize_t store_redundant_varint(unsigned char[::1] view, Py_ssize_t p, unsigned long long value, Py_ssize_t size) noexcept
@cython.locals(out=bytearray)
cpdef bytes encode_varint(object value)
cpdef write_redundant_varint(object buf, Py_ssize_t offset, object value, Py_ssize_t size=*)
cpdef object make_tag(object field_id, object wire_type)
cpdef bytes encode_tag(object field_id, object wire_type)
cpdef object zigzag_encode(object value)
cpdef object zigzag_decode(object value)
