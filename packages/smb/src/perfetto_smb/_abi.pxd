import cython

cdef int _RETRY_ATTEMPTS
cdef unsigned int _FREE
cdef unsigned int _BEING_WRITTEN
cdef unsigned int _BEING_READ
cdef unsigned int _COMPLETE
cdef Py_ssize_t _PAGE_HEADER
cdef Py_ssize_t _CHUNK_HEADER
cdef unsigned int _LAYOUT_MASK
cdef unsigned int _LAYOUT_SHIFT
cdef unsigned int _ALL_CHUNKS_MASK
cdef unsigned int _CHUNK_MASK
cdef Py_ssize_t _CHUNK_SHIFT
cdef tuple _NUM_CHUNKS

cdef class Chunk:
    cdef object _abi
    cdef public Py_ssize_t page_idx
    cdef public Py_ssize_t chunk_idx
    cdef public Py_ssize_t begin
    cdef public Py_ssize_t size


cdef class SharedMemoryABI:
    cdef object _atomics
    cdef unsigned char[::1] _bytes
    cdef public object buffer
    cdef public tuple chunk_sizes
    cdef public bint emulation
    cdef public object halves
    cdef public Py_ssize_t num_pages
    cdef public Py_ssize_t page_size
    cdef public Py_ssize_t size
    cdef public object view
    cdef public object words

    cpdef Py_ssize_t _page_offset(self, object page_idx) except -1
    @cython.locals(word="unsigned int")
    cdef unsigned int _relaxed_word(self, Py_ssize_t offset) noexcept
    @cython.locals(found="unsigned int")
    cdef unsigned int _compare_exchange(self, Py_ssize_t offset, unsigned int expected, unsigned int desired) noexcept
    @cython.locals(chunk_id="unsigned int", packets="unsigned int", payload_begin=Py_ssize_t, payload=bytes)
    cdef tuple _take_chunk_bytes(self, Py_ssize_t begin, Py_ssize_t size)
    @cython.locals(taken=tuple, begin=Py_ssize_t, size=Py_ssize_t, bitmap="unsigned int",
                   chunk_id="unsigned int", packets="unsigned int")
    cpdef read_and_free_chunk(self, object page_idx, object chunk_idx)
    @cython.locals(begin=Py_ssize_t, size=Py_ssize_t, bitmap="unsigned int")
    cpdef tuple begin_read(self, object page_idx, object chunk_idx)
    @cython.locals(
        offset=Py_ssize_t, shift=Py_ssize_t, layout=Py_ssize_t, attempt=int, size=Py_ssize_t,
        chunks=Py_ssize_t, state_low_bit="unsigned int", bitmap="unsigned int",
        found="unsigned int",
    )
    cdef (Py_ssize_t, Py_ssize_t, unsigned int) _begin_read(self, Py_ssize_t page_idx, Py_ssize_t chunk_idx) except *
    @cython.locals(offset=Py_ssize_t, freed="unsigned int")
    cpdef end_read(self, Py_ssize_t page_idx, Py_ssize_t chunk_idx, Py_ssize_t begin, Py_ssize_t size, unsigned int bitmap)
    cdef _write_chunk_header(self, Py_ssize_t begin, object chunk_id, object writer_id, object packet_count, object flags)
    cdef Chunk _acquire_for_writing(self, object page_idx, object chunk_idx, object chunk_id, object writer_id, object packet_count, object flags)
    @cython.locals(
        offset=Py_ssize_t, desired="unsigned int", size=Py_ssize_t, begin=Py_ssize_t,
        layout_shift="unsigned int", layout_mask="unsigned int", header_size=Py_ssize_t,
    )
    cdef Chunk _acquire_in_free_page(self, object page_idx, Py_ssize_t layout, object chunk_id, object writer_id, object packet_count, object flags)
    cpdef release_chunk_as_complete(self, object chunk)
    @cython.locals(
        offset=Py_ssize_t, shift=Py_ssize_t, expected_state="unsigned int",
        keep="unsigned int", bitmap="unsigned int", state="unsigned int",
        desired_bitmap="unsigned int", found="unsigned int", attempt=int, size=Py_ssize_t,
        chunk_mask="unsigned int", layout_mask="unsigned int", layout_shift="unsigned int",
        all_chunks_mask="unsigned int",
    )
    cdef object _release(self, object chunk, unsigned int desired)
