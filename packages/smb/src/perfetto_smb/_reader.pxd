import cython

from perfetto_smb._abi cimport SharedMemoryABI


cdef class SharedMemoryReader:
    cdef public SharedMemoryABI abi
    cdef public object rejected
    cdef public Py_ssize_t chunks_read

    @cython.locals(read=tuple)
    cpdef read_chunk(self, object page_idx, object chunk_idx)
