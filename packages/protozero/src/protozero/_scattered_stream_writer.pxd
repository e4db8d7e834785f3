import cython


cdef class ScatteredStreamWriter:
    cdef object _delegate
    cdef public object buffer
    cdef unsigned char[::1] _view
    cdef public Py_ssize_t write_ptr
    cdef public Py_ssize_t end
    cdef public Py_ssize_t _begin
    cdef public Py_ssize_t _written_previously
    cdef public Py_ssize_t _origin

    cpdef reset(self, object buffer, Py_ssize_t begin, Py_ssize_t end)
    cpdef extend(self)
    cpdef write_byte(self, unsigned char value)
    @cython.locals(p=Py_ssize_t, q=Py_ssize_t, n=Py_ssize_t)
    cpdef write_bytes(self, object data)
    @cython.locals(p=Py_ssize_t)
    cpdef Py_ssize_t reserve_bytes(self, Py_ssize_t size) except -1
    @cython.locals(p=Py_ssize_t)
    cpdef rewind(self, Py_ssize_t size, Py_ssize_t offset)
    cpdef Py_ssize_t bytes_available(self)
    cpdef Py_ssize_t written(self)
    @cython.locals(p=Py_ssize_t, room=Py_ssize_t, n=Py_ssize_t)
    cpdef Py_ssize_t write_size_prefixed(self, bytes data, Py_ssize_t min_room) except -2
