import cython

from perfetto_smb._abi cimport SharedMemoryABI


cdef class SharedMemoryReader:
    cdef public SharedMemoryABI abi
    cdef public object rejected
    cdef public Py_ssize_t chunks_read
    cdef Py_ssize_t _page
    cdef Py_ssize_t _chunk
    cdef Py_ssize_t _begin
    cdef Py_ssize_t _size
    cdef unsigned int _bitmap
    cdef unsigned int _writer_id
    cdef unsigned int _chunk_id
    cdef unsigned int _packet_count
    cdef unsigned int _flags
    cdef object _open_payload

    @cython.locals(opened=tuple)
    cpdef read_chunk(self, object page_idx, object chunk_idx)
    @cython.locals(begin=Py_ssize_t)
    cpdef tuple open_chunk(self, object page_idx, object chunk_idx)
    @cython.locals(
        abi=SharedMemoryABI, begin=Py_ssize_t, size=Py_ssize_t,
        bitmap="unsigned int", chunk_id="unsigned int", packets="unsigned int",
        writer_id="unsigned int",
    )
    cdef bint _begin_chunk(self, object page_idx, object chunk_idx) except -1
    @cython.locals(page_idx=Py_ssize_t)
    cpdef bint close_chunk(self) except -1
    @cython.locals(header_size=Py_ssize_t, start=Py_ssize_t, end=Py_ssize_t)
    cdef const unsigned char[::1] _chunk_payload(self)
    cdef bint _end_read(self, Py_ssize_t page_idx, Py_ssize_t chunk_idx, Py_ssize_t begin, Py_ssize_t size, unsigned int bitmap) except -1
