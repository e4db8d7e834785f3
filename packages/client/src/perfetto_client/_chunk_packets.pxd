import cython


@cython.final
cdef class ChunkPackets:
    cdef bytes _needs_state
    cdef object _sink
    cdef void *_reserve_fn
    cdef void *_commit_fn
    cdef Py_ssize_t _packet_size
    cdef readonly bint bound

    @cython.locals(api=object)
    cpdef bind(self, object sink)
    cpdef unbind(self)
    @cython.locals(body=Py_ssize_t, p="unsigned char *")
    cdef bint put(self, long long delta, bytes interned, bytes fields, bytes extra, bytes extra2, bytes extra3, bint event) except -1
    @cython.locals(encoded="unsigned long long", body=Py_ssize_t, p="unsigned char *")
    cdef bint put_counter(self, long long delta, bytes head, bytes track_field, bytes tag, long long value) except -1
    @cython.locals(p="unsigned char *", prefix=bytes, i=Py_ssize_t, value=object)
    cdef bint put_annotated(self, long long delta, bytes fields, Py_ssize_t size, tuple prefixes, tuple values) except -1
    @cython.locals(size=Py_ssize_t, p="unsigned char *")
    cdef unsigned char *_open(self, long long delta, bytes interned, Py_ssize_t body, bint event) except? NULL
    cdef int _close(self, unsigned char *p, bint event) except -1


@cython.locals(n=Py_ssize_t, body=Py_ssize_t, size=Py_ssize_t)
cdef Py_ssize_t annotation_size(bytes prefix, object value) except -2
@cython.locals(overflow=int, number="long long", length=Py_ssize_t, size=Py_ssize_t, total=Py_ssize_t)
cdef Py_ssize_t _value_size(object value) except -2
@cython.locals(overflow=int, number=double, length=Py_ssize_t, text="const char *")
cdef unsigned char *_put_value(unsigned char *p, object value) except? NULL
