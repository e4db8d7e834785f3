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

cdef Py_ssize_t _body_size(Py_ssize_t size) noexcept
@cython.locals(length=bytearray)
cdef bytes _long_prefix(Py_ssize_t size)


@cython.final
cdef class ReplyWriter:
    cdef unsigned char[::1] _out
    cdef Py_ssize_t _used
    cdef Py_ssize_t _estimated
    cdef Py_ssize_t _room
    cdef list _replies

    @cython.locals(count=Py_ssize_t, index=Py_ssize_t)
    cpdef add_packet(self, object packet)
    cpdef list replies(self)
    cdef int _add_span(
        self, const unsigned char[::1] source, Py_ssize_t start, Py_ssize_t end, bint last
    ) except -1
    @cython.locals(size=Py_ssize_t, room=Py_ssize_t, prefix=bytes, long_prefix=bytes)
    cdef int _add_slice(
        self, const unsigned char[::1] source, Py_ssize_t start, Py_ssize_t end, bint last
    ) except -1
    @cython.locals(used=Py_ssize_t, size=Py_ssize_t)
    cdef void _put_bytes(self, bytes data) noexcept
    @cython.locals(used=Py_ssize_t)
    cdef void _put_span(
        self, const unsigned char[::1] source, Py_ssize_t start, Py_ssize_t size
    ) noexcept
    @cython.locals(reply=bytes)
    cdef int _close(self) except -1


@cython.locals(writer=ReplyWriter)
cpdef list read_buffers_replies(object packets)
cpdef bytes packet_preamble(Py_ssize_t packet_size)
@cython.locals(parts=list, preambles=tuple, limit=Py_ssize_t, size=Py_ssize_t)
cpdef bytes trace_file_bytes(object packets)
