import cython

@cython.locals(
    buf="const unsigned char[::1]", end=Py_ssize_t, pos=Py_ssize_t, at=Py_ssize_t,
    stop=Py_ssize_t, tag="unsigned long long", size="unsigned long long",
)
cpdef Py_ssize_t heap_packets(bytes data, long long base, list found) except -1


@cython.locals(
    tag="unsigned long long", value="unsigned long long", size="unsigned long long",
    field_id="unsigned long long", wire_type=int,
)
cdef bint _wanted(const unsigned char[::1] buf, Py_ssize_t pos, Py_ssize_t end) noexcept
