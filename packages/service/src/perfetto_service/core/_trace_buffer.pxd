import cython

from protozero._decoder cimport read_varint

from perfetto_service.core._chunk_index cimport ChunkIndex

cdef Py_ssize_t RECORD_HEADER_SIZE
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
cdef Py_ssize_t _F_OFFSET
cdef Py_ssize_t _F_SIZE
cdef Py_ssize_t _F_FRAGMENTS
cdef Py_ssize_t _F_FLAGS
cdef Py_ssize_t _F_READ
cdef Py_ssize_t _F_CUR
cdef Py_ssize_t _F_STATE
cdef Py_ssize_t _STRIDE
cdef long long _COMPLETE
cdef long long _SKIPPED

cdef unsigned long long _chunk_key(
    unsigned long long producer_id, unsigned long long writer_id, unsigned long long chunk_id
) noexcept

cdef bint _before(Py_ssize_t chunk_id, Py_ssize_t other) noexcept

@cython.locals(size=Py_ssize_t, start=Py_ssize_t)
cdef tuple _fragment_header(const unsigned char[::1] data, Py_ssize_t pos, Py_ssize_t end)
@cython.locals(
    size=Py_ssize_t, start=Py_ssize_t, following=Py_ssize_t, after=Py_ssize_t, i=Py_ssize_t
)
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
cdef class BufferStats:
    cdef public long long bytes_written
    cdef public long long chunks_written
    cdef public long long chunks_overwritten
    cdef public long long write_wrap_count
    cdef public long long patches_succeeded
    cdef public long long patches_failed
    cdef public long long readaheads_succeeded
    cdef public long long readaheads_failed
    cdef public long long abi_violations
    cdef public long long chunks_rewritten
    cdef public long long chunks_committed_out_of_order
    cdef public long long buffer_size
    cdef public long long bytes_overwritten
    cdef public long long bytes_read
    cdef public long long padding_bytes_written
    cdef public long long padding_bytes_cleared
    cdef public long long chunks_read
    cdef public long long chunks_discarded
    cdef public long long trace_writer_packet_loss
    cdef public long long chunks_relocated


@cython.final
cdef class _Sequence:
    cdef public Py_ssize_t chunk_count
    cdef public Py_ssize_t last_written
    cdef public Py_ssize_t oldest
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
    cdef ChunkIndex _index
    cdef readonly dict _sequences
    cdef _Sequence _last_seq
    cdef bint _oldest_found
    cdef object _removed_slots
    cdef long long[::1] _removed
    cdef bint _discard_writes
    cdef bint _has_data
    cdef BufferStats _stats
    cdef dict _writer_stats
    cdef list _read_order
    cdef Py_ssize_t _read_pos
    cdef _Sequence _read_seq
    cdef Py_ssize_t _read_chunk_id
    cdef Py_ssize_t _read_slot

    @cython.locals(index=ChunkIndex, fields="long long[::1]", slot=Py_ssize_t, base=Py_ssize_t)
    cdef object _insert(
        self, unsigned long long key, object props, _Sequence seq, Py_ssize_t offset, Py_ssize_t record_size,
        Py_ssize_t num_fragments, Py_ssize_t flags, bint complete,
    )
    cdef object _remove(self, Py_ssize_t slot)

    @cython.locals(
        size=Py_ssize_t, header_size=Py_ssize_t, record_size=Py_ssize_t, producer_id=Py_ssize_t,
        writer_id=Py_ssize_t,
    )
    cdef object _copy_chunk(
        self, object sequence, Py_ssize_t chunk_id, Py_ssize_t num_fragments,
        Py_ssize_t chunk_flags,
        const unsigned char[::1] payload, bint chunk_complete,
    )
    @cython.locals(
        stats=BufferStats, key="unsigned long long", existing=Py_ssize_t, size_to_end=Py_ssize_t, offset=Py_ssize_t,
        data="unsigned char[::1]", padding=Py_ssize_t, start=Py_ssize_t, seq=_Sequence,
    )
    cdef object _store_chunk(
        self, object sequence, Py_ssize_t producer_id, Py_ssize_t writer_id,
        Py_ssize_t chunk_id, Py_ssize_t num_fragments, Py_ssize_t chunk_flags,
        const unsigned char[::1] payload, Py_ssize_t size, Py_ssize_t record_size,
        bint chunk_complete,
    )
    @cython.locals(
        size=Py_ssize_t, record_size=Py_ssize_t, first_packet_new=bint, offset=Py_ssize_t,
        fields="long long[::1]", base=Py_ssize_t, old_fragments=Py_ssize_t, old_flags=Py_ssize_t,
        following=Py_ssize_t, seq=_Sequence,
    )
    cdef object _recommit(
        self, Py_ssize_t slot, Py_ssize_t producer_id, Py_ssize_t writer_id, Py_ssize_t chunk_id,
        Py_ssize_t num_fragments, Py_ssize_t chunk_flags, const unsigned char[::1] payload,
        bint complete,
    )
    @cython.locals(start=Py_ssize_t, rounding=Py_ssize_t)
    cdef object _write_record(
        self, Py_ssize_t offset, Py_ssize_t record_size, Py_ssize_t producer_id,
        Py_ssize_t writer_id, Py_ssize_t chunk_id, Py_ssize_t num_fragments, Py_ssize_t flags,
        const unsigned char[::1] payload, Py_ssize_t size,
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
        padding_cleared=Py_ssize_t, record_size=Py_ssize_t, flags=Py_ssize_t,
        fields="long long[::1]", view="unsigned char[::1]", slot=Py_ssize_t, base=Py_ssize_t,
        removed="long long[::1]", count=Py_ssize_t, i=Py_ssize_t, chunk_id="unsigned long long",
        producer_id=Py_ssize_t, writer_id=Py_ssize_t, stats=BufferStats,
    )
    cdef Py_ssize_t _delete_next_chunks_for(self, Py_ssize_t bytes_to_clear) except -2
    @cython.locals(
        seq=_Sequence, key="unsigned long long", chunk_id=Py_ssize_t,
        sequence_key="unsigned long long",
    )
    cdef object _forget_chunk(self, Py_ssize_t slot)
    cdef object _end_read_pass(self)
    @cython.locals(
        payload_start=Py_ssize_t, whole_end=Py_ssize_t, reads=Py_ssize_t, pos=Py_ssize_t,
        bad_size=Py_ssize_t, fields="long long[::1]", base=Py_ssize_t, record_offset=Py_ssize_t,
        record_size=Py_ssize_t, num_fragments=Py_ssize_t,
    )
    cdef tuple _read_whole_fragments(self, Py_ssize_t slot, object max_bytes)
    @cython.locals(sequence_key="unsigned long long", slot=Py_ssize_t)
    cdef bint _enter_sequence(self, _Sequence seq) except -1
    @cython.locals(
        seq=_Sequence, index=ChunkIndex, keys="unsigned long long[::1]", seqs=list,
        slot=Py_ssize_t, chunk_id=Py_ssize_t, last=Py_ssize_t,
    )
    cdef object _find_oldest(self)
    @cython.locals(
        slot=Py_ssize_t, seq=_Sequence, chunk_id=Py_ssize_t, following=Py_ssize_t,
        fields="long long[::1]", base=Py_ssize_t,
    )
    cdef object _move_next(self)
    @cython.locals(
        seq=_Sequence, fields="long long[::1]", sequence_key="unsigned long long",
        last_written=Py_ssize_t, ahead_id=Py_ssize_t, ahead=Py_ssize_t, num_fragments=Py_ssize_t,
        flags=Py_ssize_t, current=Py_ssize_t,
    )
    cdef tuple _read_ahead(self)
    @cython.locals(
        record_end=Py_ssize_t, payload_start=Py_ssize_t, pos=Py_ssize_t, size=Py_ssize_t,
        start=Py_ssize_t, following=Py_ssize_t, fields="long long[::1]", base=Py_ssize_t,
        record_offset=Py_ssize_t,
    )
    cdef bint _read_fragment(self, Py_ssize_t slot, list slices) except -1
    @cython.locals(fields="long long[::1]", base=Py_ssize_t, key="unsigned long long")
    cdef object _chunk_read(self, Py_ssize_t slot)
    cdef object _fragment_error(self, Py_ssize_t slot, Py_ssize_t size)
    @cython.locals(fields="long long[::1]", base=Py_ssize_t)
    cdef object _give_up_chunk(self, Py_ssize_t slot)
