import cython

from perfetto_smb._abi cimport SharedMemoryABI


cdef class SharedMemoryReader:
    cdef public SharedMemoryABI abi
    cdef public object rejected
    cdef public Py_ssize_t chunks_read
    cdef tuple _open
    cdef object _open_payload

    @cython.locals(opened=tuple)
    cpdef read_chunk(self, object page_idx, object chunk_idx)
    @cython.locals(
        abi=SharedMemoryABI, taken=tuple, begin=Py_ssize_t, size=Py_ssize_t,
        bitmap="unsigned int", chunk_id="unsigned int", packets="unsigned int",
        writer_id="unsigned int",
    )
    cpdef tuple open_chunk(self, object page_idx, object chunk_idx)
    @cython.locals(opened=tuple)
    cpdef bint close_chunk(self) except -1
    cdef bint _end_read(self, object page_idx, Py_ssize_t chunk_idx, Py_ssize_t begin, Py_ssize_t size, unsigned int bitmap) except -1
