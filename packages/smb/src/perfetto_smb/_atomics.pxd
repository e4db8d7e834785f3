import cython


cdef class AtomicWords:
    cdef object _anchor
    cdef object _base
    cdef unsigned char[::1] _bytes
    cdef object _cas
    cdef Py_ssize_t _limit
    cdef object _load
    cdef dict _pointers
    cdef object _store

    cdef _check(self, Py_ssize_t offset)
    cpdef object pointer(self, Py_ssize_t offset)
    @cython.locals(word="unsigned int")
    cpdef unsigned int load(self, Py_ssize_t offset) except? 0xFFFFFFFF
    cpdef store(self, Py_ssize_t offset, object value)
    cpdef unsigned int compare_exchange(self, Py_ssize_t offset, object expected, object desired) except? 0xFFFFFFFF
    @cython.locals(found="unsigned int", at="unsigned char *")
    cpdef unsigned int compare_exchange_at(self, Py_ssize_t pointer, object expected, object desired) except? 0xFFFFFFFF
    cpdef close(self)
