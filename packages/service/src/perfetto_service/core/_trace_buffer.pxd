import cython

from protozero._decoder cimport read_varint

@cython.locals(size=Py_ssize_t, start=Py_ssize_t)
cdef tuple _fragment_header(const unsigned char[::1] data, Py_ssize_t pos, Py_ssize_t end)
@cython.locals(
    buf="const unsigned char[::1]", gathered=Py_ssize_t, word=Py_ssize_t, size=Py_ssize_t,
    start=Py_ssize_t, following=Py_ssize_t,
)
cdef tuple _scan_fragments(
    const unsigned char[::1] data, Py_ssize_t pos, Py_ssize_t record_end, Py_ssize_t reads,
    Py_ssize_t whole_end, Py_ssize_t max_bytes, list offsets,
)
