import cython


@cython.locals(value="unsigned long long", low="unsigned long long", shift=int, limit=Py_ssize_t, b="unsigned char")
cpdef tuple read_varint(const unsigned char[::1] buf, Py_ssize_t pos, Py_ssize_t end)


@cython.final
cdef class Field:
    cdef object _buf
    cdef Py_ssize_t _offset
    cdef object _value
    cdef public object id
    cdef public object type
    cdef public Py_ssize_t size
