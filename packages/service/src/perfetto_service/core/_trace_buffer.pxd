import cython

from protozero._decoder cimport read_varint

cdef Py_ssize_t _MAX_RECORD_SIZE
cdef Py_ssize_t _CHUNK_ID_MASK
cdef Py_ssize_t _HALF_CHUNK_ID_SPACE
cdef Py_ssize_t _U16_MAX
cdef Py_ssize_t _FLAGS_MASK
cdef Py_ssize_t _PADDING_BIT
cdef Py_ssize_t _FIRST_CONTINUES
cdef Py_ssize_t _LAST_CONTINUES
cdef Py_ssize_t _NEEDS_PATCHING
cdef Py_ssize_t _POPULATE_STEP

cdef bint _before(Py_ssize_t chunk_id, Py_ssize_t other) noexcept

@cython.locals(size=Py_ssize_t, start=Py_ssize_t)
cdef tuple _fragment_header(const unsigned char[::1] data, Py_ssize_t pos, Py_ssize_t end)
@cython.locals(size=Py_ssize_t, start=Py_ssize_t, following=Py_ssize_t, after=Py_ssize_t)
cdef bint _opens_after_loss(const unsigned char[::1] data, Py_ssize_t pos, Py_ssize_t end) except -1
@cython.locals(
    buf="const unsigned char[::1]", gathered=Py_ssize_t, word=Py_ssize_t, size=Py_ssize_t,
    start=Py_ssize_t, following=Py_ssize_t,
)
cdef tuple _scan_fragments(
    const unsigned char[::1] data, Py_ssize_t pos, Py_ssize_t record_end, Py_ssize_t reads,
    Py_ssize_t whole_end, Py_ssize_t max_bytes, list offsets,
)


@cython.final
@cython.no_gc
cdef class _ChunkMeta:
    cdef public bint complete
    cdef public Py_ssize_t cur_offset
    cdef public Py_ssize_t flags
    cdef public Py_ssize_t fragments_read
    cdef public Py_ssize_t num_fragments
    cdef public object props
    cdef public Py_ssize_t record_offset
    cdef public Py_ssize_t record_size
    cdef public bint skipped


@cython.final
cdef class _Sequence:
    cdef public set chunk_ids
    cdef public Py_ssize_t last_written
    cdef public Py_ssize_t producer_id
    cdef public object resume
    cdef public bint resume_dropped
    cdef public object resume_source
    cdef public Py_ssize_t writer_id


cdef class TraceBuffer:
    cdef object __weakref__
    cdef Py_ssize_t _size
    cdef object _storage
    cdef Py_ssize_t _committed
    cdef object _data
    cdef unsigned char[::1] _bytes
    cdef object _policy
    cdef Py_ssize_t _max_record_size
    cdef Py_ssize_t _wptr
    cdef dict _index
    cdef readonly dict _sequences
    cdef bint _discard_writes
    cdef bint _has_data
    cdef object _stats
    cdef dict _writer_stats
    cdef list _read_order
    cdef Py_ssize_t _read_pos
    cdef _Sequence _read_seq
    cdef Py_ssize_t _read_chunk_id
    cdef _ChunkMeta _read_meta

    cdef object _copy_chunk(
        self, object sequence, object chunk_id, object num_fragments, object chunk_flags,
        object payload, bint chunk_complete,
    )
    @cython.locals(
        stats=object, key=tuple, existing=_ChunkMeta, size_to_end=Py_ssize_t, offset=Py_ssize_t,
        data="unsigned char[::1]", padding=Py_ssize_t, start=Py_ssize_t, seq=_Sequence,
    )
    cdef object _store_chunk(
        self, object sequence, Py_ssize_t producer_id, Py_ssize_t writer_id,
        Py_ssize_t chunk_id, Py_ssize_t num_fragments, Py_ssize_t chunk_flags, object payload,
        Py_ssize_t size, Py_ssize_t record_size, bint chunk_complete,
    )
    @cython.locals(
        size=Py_ssize_t, record_size=Py_ssize_t, first_packet_new=bint, offset=Py_ssize_t
    )
    cdef object _recommit(
        self, _ChunkMeta meta, tuple key, Py_ssize_t num_fragments, Py_ssize_t chunk_flags,
        object payload, bint complete,
    )
    @cython.locals(start=Py_ssize_t, rounding=Py_ssize_t)
    cdef object _write_record(
        self, Py_ssize_t offset, Py_ssize_t record_size, Py_ssize_t producer_id,
        Py_ssize_t writer_id, Py_ssize_t chunk_id, Py_ssize_t num_fragments, Py_ssize_t flags,
        object payload, Py_ssize_t size,
    )
    @cython.locals(view="unsigned char[::1]")
    cdef object _write_header(
        self, Py_ssize_t offset, Py_ssize_t chunk_id, Py_ssize_t producer_id,
        Py_ssize_t writer_id, Py_ssize_t num_fragments, Py_ssize_t record_size, Py_ssize_t flags,
    )
    @cython.locals(start=Py_ssize_t, stop=Py_ssize_t)
    cdef object _commit(self, Py_ssize_t end)
    cdef object _add_padding_record(self, Py_ssize_t size)
    cdef object _discard_write(self)
    @cython.locals(
        pos=Py_ssize_t, end=Py_ssize_t, overwritten=Py_ssize_t, overwritten_bytes=Py_ssize_t,
        padding_cleared=Py_ssize_t, record_size=Py_ssize_t, flags=Py_ssize_t, meta=_ChunkMeta,
        index=dict, removed=list,
    )
    cdef Py_ssize_t _delete_next_chunks_for(self, Py_ssize_t bytes_to_clear) except -2
    @cython.locals(seq=_Sequence, index=dict)
    cdef object _forget_chunk(self, tuple key)
    cdef object _end_read_pass(self)
    @cython.locals(payload_start=Py_ssize_t, whole_end=Py_ssize_t, reads=Py_ssize_t, pos=Py_ssize_t, bad_size=Py_ssize_t)
    cdef tuple _read_whole_fragments(self, _ChunkMeta meta, object max_bytes)
    @cython.locals(index=dict, meta=_ChunkMeta)
    cdef bint _enter_sequence(self, _Sequence seq) except -1
    @cython.locals(meta=_ChunkMeta, seq=_Sequence, chunk_id=Py_ssize_t, following=Py_ssize_t)
    cdef object _move_next(self)
    @cython.locals(seq=_Sequence, meta=_ChunkMeta, ahead=_ChunkMeta, found=_ChunkMeta, current=_ChunkMeta, index=dict)
    cdef tuple _read_ahead(self)
    @cython.locals(record_end=Py_ssize_t, payload_start=Py_ssize_t, pos=Py_ssize_t, size=Py_ssize_t, start=Py_ssize_t, following=Py_ssize_t)
    cdef bint _read_fragment(self, _ChunkMeta meta, list slices) except -1
    cdef object _chunk_read(self, _ChunkMeta meta)
    cdef object _fragment_error(self, _ChunkMeta meta, Py_ssize_t size)
    cdef object _give_up_chunk(self, _ChunkMeta meta)
