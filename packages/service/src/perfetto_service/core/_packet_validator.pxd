import cython

from protozero._decoder cimport read_varint

cdef Py_ssize_t _MAX_FIELD_NUMBER
cdef Py_ssize_t _MAX_VARINT_BYTES
cdef int _VARINT
cdef int _FIXED64
cdef int _LENGTH_DELIMITED
cdef int _FIXED32
cdef int _REJECT
cdef tuple _ONE_BYTE_TAGS

@cython.locals(field_number=Py_ssize_t, wire_type=int)
cdef int _tag_action(unsigned long long tag) except? -2
@cython.locals(value="unsigned long long", following=Py_ssize_t)
cdef tuple _read_varint(const unsigned char[::1] buf, Py_ssize_t pos, Py_ssize_t end)
@cython.locals(
    buf="const unsigned char[::1]", size=Py_ssize_t, one_byte_tags=tuple, valid=list,
    index=Py_ssize_t, pos=Py_ssize_t, end=Py_ssize_t, action=int, tag="unsigned long long",
    limit=Py_ssize_t, length="unsigned long long",
)
cpdef list valid_packet_spans(object data, list offsets)
