import cython

cdef Py_ssize_t _SLICE_OVERHEAD
cdef Py_ssize_t _REPLY_BUDGET
cdef Py_ssize_t _MAX_SLICE
cdef Py_ssize_t _HEAP_SLICE
cdef Py_ssize_t _SIZE_FIELD
cdef Py_ssize_t _MAX_SHORT_DATA
cdef Py_ssize_t _SHORT_FIELDS
cdef tuple _SHORT_PREFIXES
cdef dict _LONG_PREFIXES
cdef tuple _LAST_FLAGS

cdef Py_ssize_t _body_size(Py_ssize_t size) noexcept
@cython.locals(length=bytearray)
cdef bytes _long_prefix(Py_ssize_t size)
@cython.locals(
    short_prefixes=tuple, long_prefixes=dict, last_flags=tuple, replies=list, parts=list,
    estimated=Py_ssize_t, room=Py_ssize_t, count=Py_ssize_t, flags=tuple, index=Py_ssize_t,
    size=Py_ssize_t, prefix=bytes,
)
cdef list _replies(list packets)
@cython.locals(replies=list)
cpdef list read_buffers_replies(object packets)
cpdef bytes packet_preamble(Py_ssize_t packet_size)
@cython.locals(parts=list, preambles=tuple, limit=Py_ssize_t, size=Py_ssize_t)
cpdef bytes trace_file_bytes(object packets)
