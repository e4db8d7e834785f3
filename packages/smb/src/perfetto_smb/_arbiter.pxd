import cython

from perfetto_smb._abi cimport Chunk, SharedMemoryABI


cdef class SharedMemoryArbiter:
    cdef object __weakref__
    cdef public SharedMemoryABI abi
    cdef public object page_layout
    cdef public object stall_timeout
    cdef object _commit_callback
    cdef object _post_task
    cdef object _register_writer
    cdef object _unregister_writer
    cdef object _may_stall
    cdef object _lock
    cdef object _send_lock
    cdef Py_ssize_t _page_idx
    cdef object _request
    cdef Py_ssize_t _bytes_pending
    cdef bint _flush_posted
    cdef object _writer_ids
    cdef object _writers
    cdef bint _closed

    cpdef get_new_chunk(self, object writer_id, object chunk_id, object packet_count, object flags, object policy)
    @cython.locals(
        abi=SharedMemoryABI, page_words=Py_ssize_t, num_pages=Py_ssize_t, layout=Py_ssize_t,
        start=Py_ssize_t, i=Py_ssize_t, page_idx=Py_ssize_t, bitmap="unsigned int",
        num_chunks=Py_ssize_t, chunk_idx=Py_ssize_t, chunk=Chunk, layout_mask="unsigned int",
        layout_shift="unsigned int", chunk_mask="unsigned int", chunk_shift="unsigned int",
    )
    cdef Chunk _try_get_free_chunk(self, object writer_id, object chunk_id, object packet_count, object flags)
    cpdef return_completed_chunk(self, Chunk chunk, object target_buffer, object patch_list)
    @cython.locals(post=bint, flush_now=bint)
    cdef _update_commit_data_request(self, Chunk chunk, object writer_id, object target_buffer, object patch_list)
