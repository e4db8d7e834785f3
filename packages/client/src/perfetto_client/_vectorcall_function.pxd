cdef class VectorcallFunction:
    cdef void *_vectorcall
    cdef dict __dict__
    cdef object __weakref__
    cdef object _fn

    cdef void _use_vectorcall(self, void *vectorcall) noexcept
