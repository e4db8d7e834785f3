"""The service's central trace buffer, with upstream's TraceBufferV1 semantics.

Chunks copied out of producers' shared memory are stored back to back in a fixed-size
ring of 16-byte-aligned chunk records; a look-aside index keyed by (producer, writer,
chunk id) serves patching and reading. Nothing a producer can put in a chunk header or
payload raises out of this module: bad input is dropped and counted in `BufferStats`.
"""

from __future__ import annotations

import array
import bisect
import copy
import enum
import mmap
import struct
from collections.abc import Sequence
from typing import NamedTuple

from perfetto_protos.common import trace_stats_pb2
from perfetto_protos.tags import fields as tags
from perfetto_smb import PACKET_SIZE_DROP_PACKET, PATCH_SIZE, ChunkFlags

from perfetto_service._errors import ServiceError

try:
    import cython
except ImportError:  # installed without Cython: runs as pure Python
    from protozero import _cython_shim as cython

if cython.compiled:
    from cython.cimports.libc.string import memcpy, memset
else:  # compiled, _trace_buffer.pxd cimports them
    from protozero._decoder import read_varint

    from perfetto_service.core._chunk_index_pure import ChunkIndex

from perfetto_service.core._field_encoding import varint_field

RECORD_HEADER_SIZE = 16
"""Size of the header stored in front of every chunk record (upstream's ChunkRecord)."""

_MAX_RECORD_SIZE = 0xFFFF
_CHUNK_ID_MASK = 0xFFFFFFFF
_HALF_CHUNK_ID_SPACE = 0x80000000
_U16_MAX = 0xFFFF
_FLAGS_MASK = 0x3F
_PADDING_BIT = 0x40
# chunk_id u32, producer_id u16, writer_id u16, num_fragments u16, record size u16,
# flags byte (bits 0-5 chunk flags, bit 6 padding), then "CHU" as a marker.
_HEADER = struct.Struct("<IHHHHB3s")
_HEADER_MARK = b"CHU"
_ZEROS = bytes(RECORD_HEADER_SIZE)
_U32 = struct.Struct("<I")
_POPULATE_WRITE = getattr(mmap, "MADV_POPULATE_WRITE", 23)  # Linux 5.14
_POPULATE_STEP = 1 << 20
"""Pages are committed up to this many bytes at a time ahead of the writes (one call, no
faults)."""
_FIRST_POPULATE_STEP = 64 << 10
"""The first commit's step; each next one commits as much as is committed, up to
`_POPULATE_STEP`, so that a short session does not pay for pages it never writes."""

BytesLike = bytes | bytearray | memoryview
"""What chunk payloads may be given as (a memoryview of a shared memory mapping included)."""


_FIRST_CONTINUES = int(ChunkFlags.FIRST_PACKET_CONTINUES_FROM_PREV_CHUNK)
_LAST_CONTINUES = int(ChunkFlags.LAST_PACKET_CONTINUES_ON_NEXT_CHUNK)
_NEEDS_PATCHING = int(ChunkFlags.CHUNK_NEEDS_PATCHING)


class OverwritePolicy(enum.Enum):
    """What a full buffer does with new chunks (BufferConfig.fill_policy)."""

    OVERWRITE = "overwrite"
    """RING_BUFFER: the oldest chunks are overwritten."""
    DISCARD = "discard"
    """DISCARD: the first write that would clobber unread data, and every later one, is dropped."""


class PacketSequenceProperties(NamedTuple):
    """Identifies the sequence a packet was read from; the ids are trusted (from the service)."""

    producer_id: int
    producer_uid: int
    producer_pid: int | None
    writer_id: int
    machine_id: int = 0


class BufferedPacket(NamedTuple):
    """One whole packet read from a `TraceBuffer`.

    `data` is a view into the buffer's memory, valid until the next write into it (or of
    the joined fragments, for a packet that was fragmented). `previous_packet_dropped` is 1
    when data may have been lost on the sequence before this packet, else 0.
    """

    data: memoryview
    sequence: PacketSequenceProperties
    previous_packet_dropped: int


class PacketRun(NamedTuple):
    """Consecutive whole packets of one sequence, as `TraceBuffer.read_next_packets` returns.

    `previous_packet_dropped` applies to the first packet; each later one directly follows
    the one before it. A packet that was not fragmented is a view into the buffer, valid
    until the next write; a fragmented one is a view of its fragments joined.
    """

    packets: list[memoryview]
    sequence: PacketSequenceProperties
    previous_packet_dropped: int


class PacketSpans(NamedTuple):
    """Consecutive whole packets of one sequence as offsets into `data`.

    Packet i is data[offsets[2 * i] : offsets[2 * i + 1]]. `data` is the buffer's own
    memory (valid until the next write), or the joined fragments of one packet that was
    fragmented. `previous_packet_dropped` applies to the first packet, as in `PacketRun`.
    """

    data: memoryview | bytes
    offsets: list[int]
    sequence: PacketSequenceProperties
    previous_packet_dropped: int


class Patch(NamedTuple):
    """An out-of-band patch: `data` (4 bytes) goes at `offset` from the chunk payload's start."""

    offset: int
    data: bytes


_STATS_FIELDS: tuple[tuple[str, int], ...] = (
    ("bytes_written", tags.TraceStats_BufferStats_bytes_written_ID),
    ("chunks_written", tags.TraceStats_BufferStats_chunks_written_ID),
    ("chunks_overwritten", tags.TraceStats_BufferStats_chunks_overwritten_ID),
    ("write_wrap_count", tags.TraceStats_BufferStats_write_wrap_count_ID),
    ("patches_succeeded", tags.TraceStats_BufferStats_patches_succeeded_ID),
    ("patches_failed", tags.TraceStats_BufferStats_patches_failed_ID),
    ("readaheads_succeeded", tags.TraceStats_BufferStats_readaheads_succeeded_ID),
    ("readaheads_failed", tags.TraceStats_BufferStats_readaheads_failed_ID),
    ("abi_violations", tags.TraceStats_BufferStats_abi_violations_ID),
    ("chunks_rewritten", tags.TraceStats_BufferStats_chunks_rewritten_ID),
    ("chunks_committed_out_of_order", tags.TraceStats_BufferStats_chunks_committed_out_of_order_ID),
    ("buffer_size", tags.TraceStats_BufferStats_buffer_size_ID),
    ("bytes_overwritten", tags.TraceStats_BufferStats_bytes_overwritten_ID),
    ("bytes_read", tags.TraceStats_BufferStats_bytes_read_ID),
    ("padding_bytes_written", tags.TraceStats_BufferStats_padding_bytes_written_ID),
    ("padding_bytes_cleared", tags.TraceStats_BufferStats_padding_bytes_cleared_ID),
    ("chunks_read", tags.TraceStats_BufferStats_chunks_read_ID),
    ("chunks_discarded", tags.TraceStats_BufferStats_chunks_discarded_ID),
    ("trace_writer_packet_loss", tags.TraceStats_BufferStats_trace_writer_packet_loss_ID),
    ("chunks_relocated", tags.TraceStats_BufferStats_chunks_relocated_ID),
)


_STATS_NAMES = tuple(name for name, _ in _STATS_FIELDS)


class BufferStats:
    """The counters of one buffer; names and field numbers of TraceStats.BufferStats.

    Compiled, an extension type whose counters are C integers: counting a chunk creates no
    Python object.
    """

    __slots__ = _STATS_NAMES

    bytes_written: int
    chunks_written: int
    chunks_overwritten: int
    write_wrap_count: int
    patches_succeeded: int
    patches_failed: int
    readaheads_succeeded: int
    readaheads_failed: int
    abi_violations: int
    chunks_rewritten: int
    chunks_committed_out_of_order: int
    buffer_size: int
    bytes_overwritten: int
    bytes_read: int
    padding_bytes_written: int
    padding_bytes_cleared: int
    chunks_read: int
    chunks_discarded: int
    trace_writer_packet_loss: int
    chunks_relocated: int

    def __init__(self, buffer_size: int = 0) -> None:
        for name, _ in _STATS_FIELDS:
            setattr(self, name, 0)
        self.buffer_size = buffer_size

    def as_dict(self) -> dict[str, int]:
        """Every counter by its proto field name."""
        return {name: getattr(self, name) for name, _ in _STATS_FIELDS}

    def serialize(self) -> bytes:
        """The serialized TraceStats.BufferStats message (every field, in field-number order)."""
        return b"".join(
            varint_field(number, getattr(self, name))
            for name, number in sorted(_STATS_FIELDS, key=lambda item: item[1])
        )

    def to_proto(self) -> trace_stats_pb2.TraceStats.BufferStats:
        """The counters as a TraceStats.BufferStats message."""
        return trace_stats_pb2.TraceStats.BufferStats(**self.as_dict())

    def __repr__(self) -> str:
        nonzero = ", ".join(f"{k}={v}" for k, v in self.as_dict().items() if v)
        return f"BufferStats({nonzero})"


CHUNK_PAYLOAD_HISTOGRAM_THRESHOLDS: tuple[int, ...] = (
    8,
    32,
    128,
    512,
    1024,
    2048,
    4096,
    8192,
    12288,
    16384,
)
"""Upper bounds of the buckets of `ChunkPayloadHistogram`; one more bucket holds the rest."""


class ChunkPayloadHistogram:
    """How full the chunks read from one writer were (TraceStats.WriterStats).

    Each fully read chunk adds the number of payload bytes its fragments used.
    """

    __slots__ = ("counts", "sums")

    def __init__(self) -> None:
        buckets = len(CHUNK_PAYLOAD_HISTOGRAM_THRESHOLDS) + 1
        self.counts = [0] * buckets
        self.sums = [0] * buckets

    def add(self, value: int) -> None:
        """Counts one chunk that used `value` payload bytes."""
        bucket = bisect.bisect_left(CHUNK_PAYLOAD_HISTOGRAM_THRESHOLDS, value)
        self.counts[bucket] += 1
        self.sums[bucket] += value


# The chunk index (`ChunkIndex`: compiled `_chunk_index`, pure `_chunk_index_pure`). Each
# chunk record in the ring has a slot: its key (producer, writer and chunk id packed in 64
# bits) and these _STRIDE integer fields. Slots move only when an insertion rehashes the
# index, and every insertion ends the read pass first, so the read cursor can hold a slot.
_F_OFFSET = 0
"""Where the chunk's record starts in the ring."""
_F_SIZE = 1
"""The record's size (header included)."""
_F_FRAGMENTS = 2
_F_FLAGS = 3
_F_READ = 4
"""Fragments read (or skipped) so far."""
_F_CUR = 5
"""Offset of the next fragment to read, from the start of the record's payload."""
_F_STATE = 6
_STRIDE = 7
_COMPLETE = 4
_SKIPPED = 8
"""The last fragment consumed from the chunk was skipped (lost)."""


def _chunk_key(producer_id: int, writer_id: int, chunk_id: int) -> int:
    """The chunk index's key of a chunk (ids checked to be u16, u16, u32)."""
    return (producer_id << 48) | (writer_id << 32) | chunk_id


class _Sequence:
    """Per (producer, writer) bookkeeping.

    `chunk_count` is how many of its chunks the buffer holds; `oldest`, the first of them
    in the read order, once a read pass needed it (-1 before). The read walk of a sequence
    (upstream's SequenceIterator) starts at its oldest chunk and moves over consecutive
    chunk ids. Chunks already fully read stay in the buffer until overwritten, so instead of
    re-walking them on every read pass the sequence remembers where the walk arrives after
    them (`resume`) and the drop flag it carries there. Any change that could alter that
    prefix of the walk forgets the hint.
    """

    __slots__ = (
        "chunk_count",
        "last_written",
        "oldest",
        "producer_id",
        "resume",
        "resume_dropped",
        "resume_source",
        "writer_id",
    )

    def __init__(self, producer_id: int, writer_id: int) -> None:
        self.producer_id = producer_id
        self.writer_id = writer_id
        self.chunk_count = 0
        self.last_written = 0
        self.oldest = -1
        self.resume: int | None = None
        self.resume_dropped = True
        self.resume_source: int | None = None


def _fragment_header(data: memoryview, pos: int, end: int) -> tuple[int, int]:
    """Decodes a fragment's size varint in data[pos:min(pos + 4, end)].

    Returns (size, payload start); (0, pos) when the varint does not end in that range.
    """
    size, start = read_varint(data, pos, min(pos + 4, end))
    if start < 0:
        return 0, pos
    return size, start


def _opens_after_loss(data: memoryview, pos: int, end: int) -> bool:
    """Whether the chunk payload at data[pos:end] opens with a packet whose first field is a
    nonzero previous_packet_dropped: its writer dropped packets just before it."""
    # The packet starts 1 to 4 bytes after `pos`, past its size: most chunks' first packet
    # is told apart there by its first byte, without decoding the size.
    for i in range(pos + 1, min(pos + 5, end)):
        if data[i] == 0xD0:
            break
    else:
        return False
    size, start = _fragment_header(data, pos, end)
    following = start + size
    # TracePacket.previous_packet_dropped (field 42, varint, tag d0 02): the first field a
    # TraceWriter writes into the first packet after it dropped some.
    if size < 3 or following > end or data[start] != 0xD0 or data[start + 1] != 0x02:
        return False
    value, after = read_varint(data, start + 2, following)
    return after > 0 and value != 0


def _scan_fragments(  # noqa: PLR0917 - private, the read cursor of one chunk
    data: memoryview,
    pos: int,
    record_end: int,
    reads: int,
    whole_end: int,
    max_bytes: int,
    offsets: list[int],
) -> tuple[int, int, int]:
    """Walks the fragments of a chunk record from `pos`, appending non-empty ones to `offsets`.

    Stops after fragment number `whole_end` (counting from `reads` read so far) or once the
    fragments appended hold `max_bytes`. Returns (fragments read, position after them, -1),
    or, at a fragment that overruns `record_end`, (fragments read before it, its position,
    its declared size).
    """
    buf = data
    gathered = 0
    while reads < whole_end and gathered < max_bytes:
        if pos + 4 <= record_end:
            if cython.compiled:
                word = buf[pos] | (buf[pos + 1] << 8) | (buf[pos + 2] << 16) | (buf[pos + 3] << 24)
            else:
                (word,) = _U32.unpack_from(data, pos)
            size = word - 0x808080
            if 0 <= size < 0x80:
                # The 4-byte redundant varint of a fragment below 128 bytes.
                start = pos + 4
            elif word & 0x80808080 == 0x00808080:
                # The 4-byte redundant varint every TraceWriter writes.
                size = (
                    (word & 0x7F)
                    | ((word >> 1) & 0x3F80)
                    | ((word >> 2) & 0x1FC000)
                    | ((word >> 3) & 0xFE00000)
                )
                start = pos + 4
            else:
                size, start = _fragment_header(buf, pos, record_end)
        elif pos < record_end:
            size, start = _fragment_header(buf, pos, record_end)
        else:
            size, start = 0, pos
        following = start + size
        if following <= pos or following > record_end:
            return reads, pos, size
        reads += 1
        pos = following
        if size:
            offsets.append(start)
            offsets.append(following)
            gathered += size
    return reads, pos, -1


def _before(chunk_id: int, other: int) -> bool:
    """Whether `chunk_id` comes strictly before `other` in wrapping chunk-id order."""
    return 0 < ((other - chunk_id) & _CHUNK_ID_MASK) < _HALF_CHUNK_ID_SPACE


_AHEAD_OK = 0
_AHEAD_NEXT_SEQUENCE = 1
_AHEAD_STAY = 2


class TraceBuffer:
    """A central trace buffer holding chunks from many producers and writers."""

    def __init__(
        self, size: int, overwrite_policy: OverwritePolicy = OverwritePolicy.OVERWRITE
    ) -> None:
        if size <= 0 or size % RECORD_HEADER_SIZE or size > _CHUNK_ID_MASK:
            raise ServiceError(
                f"trace buffer size must be a positive multiple of {RECORD_HEADER_SIZE} "
                f"below 4 GiB, got {size}"
            )
        self._size = size
        # Pages are committed as the writes reach them: memory grows with the data, not the
        # size. `_committed` is how far they are.
        storage = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        self._storage = storage  # takes any bytes-like payload, whatever its item format
        self._data = memoryview(storage)
        self._committed = 0
        self._bytes = self._data
        self._policy = overwrite_policy
        self._max_record_size = min(size, _MAX_RECORD_SIZE)
        self._wptr = 0
        self._index = ChunkIndex(_STRIDE)
        self._sequences: dict[tuple[int, int], _Sequence] = {}
        self._last_seq: _Sequence | None = None
        """The sequence of the last chunk stored: the next one's too, most of the time."""
        self._oldest_found = False
        """Whether this read pass found every sequence's `oldest` chunk."""
        # The slots of the chunks one write takes out: it clears less than a record's maximum
        # size, and a record is at least a header.
        removable = self._max_record_size // RECORD_HEADER_SIZE + 1
        self._removed_slots = array.array("q", bytes(8 * removable))
        self._removed = self._removed_slots
        self._discard_writes = False
        self._has_data = False
        self._stats = BufferStats(size)
        self._writer_stats: dict[tuple[int, int], ChunkPayloadHistogram] = {}
        # Read pass state (upstream's read_iter_).
        self._read_order: list[_Sequence] = []
        self._read_pos = 0
        self._read_seq: _Sequence | None = None
        self._read_chunk_id = 0
        self._read_slot = -1

    @property
    def size(self) -> int:
        """Capacity in bytes."""
        return self._size

    @property
    def overwrite_policy(self) -> OverwritePolicy:
        """The fill policy this buffer was created with."""
        return self._policy

    @property
    def stats(self) -> BufferStats:
        """The live counters of this buffer."""
        return self._stats

    @property
    def writer_stats(self) -> dict[tuple[int, int], ChunkPayloadHistogram]:
        """Chunk fill histograms by (producer id, writer id), for TraceStats.writer_stats."""
        return self._writer_stats

    @property
    def has_data(self) -> bool:
        """Whether any chunk was ever copied into this buffer."""
        return self._has_data

    def clone(self) -> TraceBuffer:
        """A copy (contents, chunk index, sequences, stats) that reads on its own."""
        clone = TraceBuffer(self._size, self._policy)
        # Only what was ever written: the rest of the clone stays uncommitted too.
        end = self._size if self._stats.write_wrap_count else self._wptr
        clone._commit(end)
        clone._data[:end] = self._data[:end]
        clone._wptr = self._wptr
        clone._discard_writes = self._discard_writes
        clone._has_data = self._has_data
        clone._read_pos = self._read_pos
        clone._read_chunk_id = self._read_chunk_id
        clone._read_slot = self._read_slot
        clone._index = index = self._index.copy()
        # One deep copy, so that the read cursor and the sequences keep pointing at each other.
        (
            clone._sequences,
            index.seqs,
            clone._stats,
            clone._writer_stats,
            clone._read_order,
            clone._read_seq,
        ) = copy.deepcopy(
            (
                self._sequences,
                self._index.seqs,
                self._stats,
                self._writer_stats,
                self._read_order,
                self._read_seq,
            )
        )
        return clone

    # The chunk index -------------------------------------------------------------------

    def _insert(  # noqa: PLR0917 - private, a new chunk's fields
        self,
        key: int,
        props: PacketSequenceProperties,
        seq: _Sequence,
        offset: int,
        record_size: int,
        num_fragments: int,
        flags: int,
        complete: bool,
    ) -> None:
        """Adds the chunk with `key` (not in the buffer) to the index, nothing read yet."""
        index = self._index
        slot = index.insert(key)
        index.props[slot] = props
        index.seqs[slot] = seq
        seq.chunk_count += 1
        fields = index.fields
        base = slot * _STRIDE
        fields[base + _F_OFFSET] = offset
        fields[base + _F_SIZE] = record_size
        fields[base + _F_FRAGMENTS] = num_fragments
        fields[base + _F_FLAGS] = flags
        fields[base + _F_READ] = 0
        fields[base + _F_CUR] = 0
        fields[base + _F_STATE] = _COMPLETE if complete else 0

    def _remove(self, slot: int) -> None:
        """Takes the chunk in `slot` out of the index (`_forget_chunk` updates its sequence)."""
        self._index.remove(slot)
        self._index.props[slot] = None

    # Writing ---------------------------------------------------------------------------

    def copy_chunk_untrusted(
        self,
        sequence: PacketSequenceProperties,
        chunk_id: int,
        num_fragments: int,
        chunk_flags: int,
        payload: BytesLike,
        *,
        chunk_complete: bool = True,
    ) -> None:
        """Copies one chunk's payload (the bytes after its 8-byte header) into the buffer.

        `sequence` (producer and writer ids, producer identity) is trusted: the writer id is
        the one from the chunk header, after the service checked it. Everything else comes
        from the producer and is checked. An incomplete chunk (`chunk_complete` false, e.g.
        scraped) has its last fragment ignored; committing the same chunk again later
        replaces it, provided its size is unchanged, its fragment count did not shrink and
        no flag was removed.
        """
        if isinstance(payload, memoryview) and payload.itemsize != 1:
            payload = payload.cast("B")  # sized in bytes, as the buffer copies it
        try:
            self._copy_chunk(
                sequence, chunk_id, num_fragments, chunk_flags, payload, chunk_complete
            )
        except OverflowError:  # compiled, an id or count beyond 64 bits: out of range too
            self._stats.abi_violations += 1

    def _copy_chunk(  # noqa: PLR0917 - private, copy_chunk_untrusted's arguments
        self,
        sequence: PacketSequenceProperties,
        chunk_id: int,
        num_fragments: int,
        chunk_flags: int,
        payload: BytesLike,
        chunk_complete: bool,
    ) -> None:
        """`copy_chunk_untrusted` of a payload of bytes (compiled, a view of them: a chunk in
        an SMB is copied from where it is)."""
        producer_id = sequence.producer_id
        writer_id = sequence.writer_id
        size = len(payload)
        header_size = RECORD_HEADER_SIZE  # compiled, a C integer: no Python int per chunk
        record_size = (size + header_size + 15) & ~15
        stats = self._stats
        if (
            record_size > self._max_record_size
            or not 0 <= writer_id <= _U16_MAX
            or not 0 <= producer_id <= _U16_MAX
            or not 0 <= chunk_id <= _CHUNK_ID_MASK
            or not 0 <= num_fragments <= _U16_MAX
            or not 0 <= chunk_flags <= 0xFF
        ):
            stats.abi_violations += 1
            return
        self._store_chunk(
            sequence,
            producer_id,
            writer_id,
            chunk_id,
            num_fragments,
            chunk_flags,
            payload,
            size,
            record_size,
            chunk_complete,
        )

    def _store_chunk(  # noqa: PLR0917 - private, a checked chunk's fields
        self,
        sequence: PacketSequenceProperties,
        producer_id: int,
        writer_id: int,
        chunk_id: int,
        num_fragments: int,
        chunk_flags: int,
        payload: BytesLike,
        size: int,
        record_size: int,
        chunk_complete: bool,
    ) -> None:
        """`copy_chunk_untrusted` for a chunk whose ids, counts and size were checked."""
        stats = self._stats
        self._has_data = True
        if self._read_order:
            self._end_read_pass()
        chunk_flags &= _FLAGS_MASK
        if not chunk_complete and num_fragments > 0:
            # The producer may still be writing the last fragment: leave it out.
            num_fragments -= 1
            chunk_flags &= ~(_LAST_CONTINUES | _NEEDS_PATCHING)

        key = _chunk_key(producer_id, writer_id, chunk_id)
        existing = self._index.find(key)
        if existing >= 0:
            self._recommit(
                existing,
                producer_id,
                writer_id,
                chunk_id,
                num_fragments,
                chunk_flags,
                payload,
                chunk_complete,
            )
            return
        if self._discard_writes:
            self._discard_write()
            return

        size_to_end = self._size - self._wptr
        if record_size > size_to_end:
            if self._delete_next_chunks_for(size_to_end) < 0:
                self._discard_write()
                return
            self._add_padding_record(size_to_end)
            self._wptr = 0
            stats.write_wrap_count += 1
        offset = self._wptr
        if offset + record_size > self._committed:
            self._commit(offset + record_size)
        data = self._bytes
        # A record size of 0 where the record goes: the rest of the buffer was never written.
        padding = (
            self._delete_next_chunks_for(record_size)
            if data[offset + 10] or data[offset + 11]
            else 0
        )
        if padding < 0:
            self._discard_write()
            return

        seq = self._last_seq
        if seq is None or seq.producer_id != producer_id or seq.writer_id != writer_id:
            seq = self._sequences.get((producer_id, writer_id))
            if seq is None:
                seq = self._sequences[producer_id, writer_id] = _Sequence(producer_id, writer_id)
            self._last_seq = seq
        stats.chunks_written += 1
        stats.bytes_written += record_size
        self._insert(
            key, sequence, seq, offset, record_size, num_fragments, chunk_flags, chunk_complete
        )
        self._write_record(
            offset,
            record_size,
            producer_id,
            writer_id,
            chunk_id,
            num_fragments,
            chunk_flags,
            payload,
            size,
        )
        if (
            num_fragments
            and not chunk_flags & _FIRST_CONTINUES
            and _opens_after_loss(data, offset + RECORD_HEADER_SIZE, offset + record_size)
        ):
            stats.trace_writer_packet_loss += 1
        offset += record_size
        if offset >= self._size:
            offset = 0
            stats.write_wrap_count += 1
        self._wptr = offset

        if seq.resume is not None and _before(chunk_id, seq.resume):
            seq.resume = None
        if ((chunk_id - seq.last_written) & _CHUNK_ID_MASK) < _HALF_CHUNK_ID_SPACE:
            seq.last_written = chunk_id
        else:
            stats.chunks_committed_out_of_order += 1

        if padding:
            self._add_padding_record(padding)

    def _recommit(  # noqa: PLR0917 - private, a chunk's fields
        self,
        slot: int,
        producer_id: int,
        writer_id: int,
        chunk_id: int,
        num_fragments: int,
        chunk_flags: int,
        payload: BytesLike,
        complete: bool,
    ) -> None:
        stats = self._stats
        size = len(payload)
        record_size = (size + RECORD_HEADER_SIZE + 15) & ~15
        fields = self._index.fields
        base = slot * _STRIDE
        old_fragments = fields[base + _F_FRAGMENTS]
        old_flags = fields[base + _F_FLAGS]
        if (
            fields[base + _F_SIZE] != record_size
            or old_fragments > num_fragments
            or (old_flags & chunk_flags) != old_flags
        ):
            stats.abi_violations += 1
            return
        if old_fragments == num_fragments:
            return
        following = self._index.find(
            _chunk_key(producer_id, writer_id, (chunk_id + 1) & _CHUNK_ID_MASK)
        )
        if following >= 0 and fields[following * _STRIDE + _F_READ] > 0:
            # Reading already moved past this chunk; rewriting it would reorder packets.
            stats.abi_violations += 1
            return
        if fields[base + _F_READ] > old_fragments:
            return
        first_packet_new = old_fragments == 0
        fields[base + _F_FRAGMENTS] = num_fragments
        fields[base + _F_FLAGS] = chunk_flags
        if complete:
            fields[base + _F_STATE] |= _COMPLETE
        else:
            fields[base + _F_STATE] &= ~_COMPLETE
        seq = self._index.seqs[slot]
        assert seq is not None
        if seq.resume is not None and _before(chunk_id, seq.resume):
            seq.resume = None
        offset = fields[base + _F_OFFSET]
        self._write_record(
            offset,
            record_size,
            producer_id,
            writer_id,
            chunk_id,
            num_fragments,
            chunk_flags,
            payload,
            size,
        )
        stats.chunks_rewritten += 1
        if (
            first_packet_new
            and not chunk_flags & _FIRST_CONTINUES
            and _opens_after_loss(self._data, offset + RECORD_HEADER_SIZE, offset + record_size)
        ):
            stats.trace_writer_packet_loss += 1

    def _write_record(  # noqa: PLR0917 - private, the fields of a record
        self,
        offset: int,
        record_size: int,
        producer_id: int,
        writer_id: int,
        chunk_id: int,
        num_fragments: int,
        flags: int,
        payload: BytesLike,
        size: int,
    ) -> None:
        """Writes a chunk record (header, `size`-byte payload, zeros up to `record_size`)."""
        self._write_header(
            offset, chunk_id, producer_id, writer_id, num_fragments, record_size, flags
        )
        start = offset + RECORD_HEADER_SIZE
        if cython.compiled:
            if size:
                memcpy(cython.address(self._bytes[start]), cython.address(payload[0]), size)
        else:
            self._storage[start : start + size] = payload
        rounding = record_size - RECORD_HEADER_SIZE - size
        if rounding:
            if cython.compiled:
                memset(cython.address(self._bytes[start + size]), 0, rounding)
            else:
                self._data[start + size : start + size + rounding] = _ZEROS[:rounding]

    def _write_header(  # noqa: PLR0917 - private, the fields of a record header
        self,
        offset: int,
        chunk_id: int,
        producer_id: int,
        writer_id: int,
        num_fragments: int,
        record_size: int,
        flags: int,
    ) -> None:
        """Writes the 16-byte record header at `offset` (_HEADER, with _HEADER_MARK)."""
        if cython.compiled:
            view = self._bytes
            view[offset] = chunk_id & 0xFF
            view[offset + 1] = (chunk_id >> 8) & 0xFF
            view[offset + 2] = (chunk_id >> 16) & 0xFF
            view[offset + 3] = (chunk_id >> 24) & 0xFF
            view[offset + 4] = producer_id & 0xFF
            view[offset + 5] = producer_id >> 8
            view[offset + 6] = writer_id & 0xFF
            view[offset + 7] = writer_id >> 8
            view[offset + 8] = num_fragments & 0xFF
            view[offset + 9] = num_fragments >> 8
            view[offset + 10] = record_size & 0xFF
            view[offset + 11] = record_size >> 8
            view[offset + 12] = flags
            view[offset + 13] = 0x43  # _HEADER_MARK, b"CHU"
            view[offset + 14] = 0x48
            view[offset + 15] = 0x55
            return
        _HEADER.pack_into(
            self._data,
            offset,
            chunk_id,
            producer_id,
            writer_id,
            num_fragments,
            record_size,
            flags,
            _HEADER_MARK,
        )

    def _commit(self, end: int) -> None:
        """Commits the pages up to `end`, and a step past the last committed: what is
        committed already, from `_FIRST_POPULATE_STEP` up to `_POPULATE_STEP`.

        Writes are sequential until the ring wraps; committing ahead in one call is half
        the CPU of a fault per page. Where the kernel cannot, pages fault in as written.
        """
        start = self._committed
        stop = max(end, start + min(max(start, _FIRST_POPULATE_STEP), _POPULATE_STEP))
        stop = min(self._size, (stop + mmap.PAGESIZE - 1) & -mmap.PAGESIZE)
        try:
            self._storage.madvise(_POPULATE_WRITE, start, stop - start)
        except OSError:
            stop = self._size
        self._committed = stop

    def _add_padding_record(self, size: int) -> None:
        self._write_header(self._wptr, 0, 0, 0, 0, size, _PADDING_BIT)
        self._stats.padding_bytes_written += size

    def _discard_write(self) -> None:
        self._discard_writes = True
        self._stats.chunks_discarded += 1

    def _delete_next_chunks_for(self, bytes_to_clear: int) -> int:
        """Removes the records overlapping [wptr, wptr + bytes_to_clear).

        Returns the gap between the end of that range and the next record (0 if the rest
        of the buffer was never written), or -1 (leaving everything untouched) if DISCARD
        forbids overwriting an unread chunk.
        """
        data = self._data
        fields = self._index.fields
        pos = self._wptr
        end = pos + bytes_to_clear
        removed = self._removed
        count = 0
        overwritten = 0
        overwritten_bytes = 0
        padding_cleared = 0
        while pos < end:
            if cython.compiled:
                view = self._bytes
                record_size = view[pos + 10] | (view[pos + 11] << 8)
                flags = view[pos + 12]
                chunk_id = view[pos + 3]  # the u32 in C: shifted 24 bits as an int, it overflows
                chunk_id = (chunk_id << 24) | (view[pos + 2] << 16) | (view[pos + 1] << 8)
                chunk_id |= view[pos]
                producer_id = view[pos + 4] | (view[pos + 5] << 8)
                writer_id = view[pos + 6] | (view[pos + 7] << 8)
            else:
                chunk_id, producer_id, writer_id, _, record_size, flags, _ = _HEADER.unpack_from(
                    data, pos
                )
            if record_size == 0:
                return 0
            if flags & _PADDING_BIT:
                padding_cleared += record_size
            else:
                slot = self._index.find(_chunk_key(producer_id, writer_id, chunk_id))
                if slot >= 0:
                    base = slot * _STRIDE
                    if fields[base + _F_READ] < fields[base + _F_FRAGMENTS]:
                        if self._policy is OverwritePolicy.DISCARD:
                            return -1
                        overwritten += 1
                        overwritten_bytes += record_size
                    removed[count] = slot
                    count += 1
            pos += record_size
        for i in range(count):
            self._remove(removed[i])
        for i in range(count):
            self._forget_chunk(removed[i])
        stats = self._stats
        if overwritten:
            stats.chunks_overwritten += overwritten
            stats.bytes_overwritten += overwritten_bytes
        if padding_cleared:
            stats.padding_bytes_cleared += padding_cleared
        return pos - end

    def _forget_chunk(self, slot: int) -> None:
        """Updates the sequence of the chunk in `slot`, just taken out of the index."""
        key = self._index.keys[slot]
        chunk_id = key & _CHUNK_ID_MASK
        seq = self._index.seqs[slot]
        assert seq is not None
        self._index.seqs[slot] = None
        seq.chunk_count -= 1
        resume = seq.resume
        if resume is None:
            return
        sequence_key = key - chunk_id
        if chunk_id == resume:
            # Overwritten before being read. With nothing read before it, the oldest chunk
            # left, where the next read starts, is its successor if that one is here.
            following = (resume + 1) & _CHUNK_ID_MASK
            if (
                self._index.find(sequence_key | ((resume - 1) & _CHUNK_ID_MASK)) < 0
                and self._index.find(sequence_key | following) >= 0
            ):
                seq.resume = following
                seq.resume_dropped = True
                seq.resume_source = None
            return
        if not _before(chunk_id, resume):
            return
        if self._index.find(sequence_key | ((chunk_id - 1) & _CHUNK_ID_MASK)) >= 0:
            # A hole in the middle of the already-read prefix: recompute on the next read.
            seq.resume = None
        elif seq.resume_source == chunk_id:
            seq.resume_dropped = True
            seq.resume_source = None

    # Patching --------------------------------------------------------------------------

    @cython.locals(  # type: ignore[untyped-decorator]
        fields="long long[::1]", slot=cython.Py_ssize_t, base=cython.Py_ssize_t
    )
    def try_patch_chunk_contents(
        self,
        producer_id: int,
        writer_id: int,
        chunk_id: int,
        patches: Sequence[Patch],
        other_patches_pending: bool,
    ) -> bool:
        """Applies `patches` to a chunk still in the buffer; False if it is gone or a patch is bad.

        Without `other_patches_pending` the chunk stops waiting for patches and can be read.
        """
        stats = self._stats
        slot = (
            self._index.find(_chunk_key(producer_id, writer_id, chunk_id))
            if 0 <= producer_id <= _U16_MAX
            and 0 <= writer_id <= _U16_MAX
            and 0 <= chunk_id <= _CHUNK_ID_MASK
            else -1
        )
        if slot < 0:
            stats.patches_failed += 1
            return False
        fields = self._index.fields
        base = slot * _STRIDE
        record_offset = fields[base + _F_OFFSET]
        payload_start = record_offset + RECORD_HEADER_SIZE
        payload_size = fields[base + _F_SIZE] - RECORD_HEADER_SIZE
        data = self._data
        for offset, patch_data in patches:
            if (
                len(patch_data) != PATCH_SIZE
                or offset < 0
                or payload_size < PATCH_SIZE
                or offset > payload_size - PATCH_SIZE
            ):
                stats.patches_failed += 1
                return False
            pos = payload_start + offset
            data[pos : pos + PATCH_SIZE] = patch_data
        stats.patches_succeeded += len(patches)
        if not other_patches_pending:
            fields[base + _F_FLAGS] &= ~_NEEDS_PATCHING
            data[record_offset + 12] = fields[base + _F_FLAGS]
        return True

    # Reading ---------------------------------------------------------------------------

    def begin_read(self) -> None:
        """Starts a read pass; follow with `read_next_trace_packet` until it returns None."""
        self._read_order = [
            self._sequences[key]
            for key in sorted(self._sequences)
            if self._sequences[key].chunk_count
        ]
        self._oldest_found = False
        self._read_pos = 0
        self._read_seq = None
        self._read_slot = -1

    def _end_read_pass(self) -> None:
        self._read_order = []
        self._read_seq = None
        self._read_slot = -1

    def read_next_trace_packet(self) -> BufferedPacket | None:
        """Returns the next whole packet of the current read pass, or None when none is left.

        Packets of one (producer, writer) sequence come in order; sequences are visited in
        (producer, writer) order. Reads are destructive: a fragment is returned once.
        A write into the buffer ends the read pass.
        """
        run = self.read_next_packets(1)
        if run is None:
            return None
        return BufferedPacket(run.packets[0], run.sequence, run.previous_packet_dropped)

    def read_next_packets(self, max_bytes: int) -> PacketRun | None:
        """Like `read_next_trace_packet`, but returns consecutive packets of one sequence.

        The run ends once its packets hold `max_bytes` or more, or where the next packet
        is not a whole fragment of the same chunk. Only the first packet of a run can follow
        a loss; the rest follow their predecessor directly.
        """
        spans = self.read_next_packet_spans(max_bytes)
        if spans is None:
            return None
        data, offsets, sequence, dropped = spans
        view = data if data is self._data else memoryview(data)
        packets = [view[offsets[i] : offsets[i + 1]] for i in range(0, len(offsets), 2)]
        return PacketRun(packets, sequence, dropped)

    @cython.locals(  # type: ignore[untyped-decorator]
        fields="long long[::1]",
        slot=cython.Py_ssize_t,
        base=cython.Py_ssize_t,
        flags=cython.Py_ssize_t,
        fragments_read=cython.Py_ssize_t,
        num_fragments=cython.Py_ssize_t,
        seq=_Sequence,
    )
    def read_next_packet_spans(self, max_bytes: int) -> PacketSpans | None:
        """`read_next_packets` returning offsets instead of views, for bulk consumers."""
        max_bytes = max(max_bytes, 1)
        prev_dropped = True
        fields = self._index.fields
        while True:
            slot = self._read_slot
            if slot < 0:
                if self._read_pos >= len(self._read_order):
                    return None
                seq = self._read_order[self._read_pos]
                self._read_pos += 1
                self._read_seq = seq
                prev_dropped = self._enter_sequence(seq)
                slot = self._read_slot
                if slot < 0:
                    continue
            base = slot * _STRIDE
            flags = fields[base + _F_FLAGS]

            if flags & _NEEDS_PATCHING:
                self._read_slot = -1
                continue

            if fields[base + _F_READ] > 0:
                prev_dropped = bool(fields[base + _F_STATE] & _SKIPPED)

            while fields[base + _F_READ] < fields[base + _F_FRAGMENTS]:
                fragments_read = fields[base + _F_READ]
                num_fragments = fields[base + _F_FRAGMENTS]
                if fragments_read == 0:
                    if flags & _FIRST_CONTINUES:
                        # Continuation of a packet whose start is lost: skip it for good.
                        self._read_fragment(slot, None)
                        fields[base + _F_STATE] |= _SKIPPED
                        prev_dropped = True
                        continue
                    read_ahead = num_fragments == 1 and bool(flags & _LAST_CONTINUES)
                else:
                    read_ahead = fragments_read == num_fragments - 1 and bool(
                        flags & _LAST_CONTINUES
                    )

                if not read_ahead:
                    offsets, failed = self._read_whole_fragments(slot, max_bytes)
                    if failed:
                        # The chunk is given up; whoever reads it next sees the loss.
                        fields[base + _F_STATE] |= _SKIPPED
                    if offsets:
                        props = self._index.props[slot]
                        assert props is not None
                        return PacketSpans(self._data, offsets, props, 1 if prev_dropped else 0)
                    if failed:
                        prev_dropped = True
                        break
                    continue

                props = self._index.props[slot]
                assert props is not None
                ahead, ahead_slices = self._read_ahead()
                if ahead == _AHEAD_OK:
                    self._stats.readaheads_succeeded += 1
                    joined = b"".join(ahead_slices)
                    return PacketSpans(joined, [0, len(joined)], props, 1 if prev_dropped else 0)
                if ahead == _AHEAD_NEXT_SEQUENCE:
                    self._stats.readaheads_failed += 1
                    self._read_slot = -1
                    break
                slot = self._read_slot
                base = slot * _STRIDE
                flags = fields[base + _F_FLAGS]
                fields[base + _F_STATE] |= _SKIPPED
                prev_dropped = True

            self._move_next()

    def _read_whole_fragments(self, slot: int, max_bytes: int) -> tuple[list[int], bool]:
        """Reads the chunk's next fragments that are whole packets, up to `max_bytes`.

        Returns the (start, end) offsets of the non-empty packets read, flattened, and
        whether a bad fragment made the chunk be given up.
        """
        fields = self._index.fields
        base = slot * _STRIDE
        record_offset = fields[base + _F_OFFSET]
        record_size = fields[base + _F_SIZE]
        num_fragments = fields[base + _F_FRAGMENTS]
        payload_start = record_offset + RECORD_HEADER_SIZE
        whole_end = num_fragments
        if fields[base + _F_FLAGS] & _LAST_CONTINUES:
            whole_end -= 1
        offsets: list[int] = []
        reads, pos, bad_size = _scan_fragments(
            self._data,
            payload_start + fields[base + _F_CUR],
            record_offset + record_size,
            fields[base + _F_READ],
            whole_end,
            min(max_bytes, record_size),  # a record holds less than its size
            offsets,
        )
        fields[base + _F_READ] = reads
        if bad_size >= 0:
            self._fragment_error(slot, bad_size)
            return offsets, True
        fields[base + _F_CUR] = pos - payload_start
        if reads == num_fragments and fields[base + _F_STATE] & _COMPLETE:
            self._chunk_read(slot)
        fields[base + _F_STATE] &= ~_SKIPPED
        return offsets, False

    def _enter_sequence(self, seq: _Sequence) -> bool:
        """Positions the read cursor on `seq`; returns the drop flag carried into it."""
        sequence_key = _chunk_key(seq.producer_id, seq.writer_id, 0)
        resume = seq.resume
        if resume is not None:
            slot = self._index.find(sequence_key | resume)
            if slot >= 0:
                self._read_chunk_id = resume
                self._read_slot = slot
                return seq.resume_dropped
            if self._index.find(sequence_key | ((resume - 1) & _CHUNK_ID_MASK)) >= 0:
                self._read_slot = -1
                return True
        if not self._oldest_found:
            self._find_oldest()
        start = seq.oldest
        seq.resume = start
        seq.resume_dropped = True
        seq.resume_source = None
        self._read_chunk_id = start
        self._read_slot = self._index.find(sequence_key | start)
        return True

    def _find_oldest(self) -> None:
        """Sets the `oldest` chunk of every sequence: the first after its last written one in
        wrapping chunk-id order (where upstream's SequenceIterator starts)."""
        for seq in self._read_order:
            seq.oldest = -1
        index = self._index
        keys = index.keys
        seqs = index.seqs
        for slot in range(len(seqs)):
            held = seqs[slot]
            if held is None:  # a free slot (or one being freed)
                continue
            seq = held
            chunk_id = keys[slot] & _CHUNK_ID_MASK
            last = seq.last_written
            if seq.oldest < 0 or ((chunk_id - last - 1) & _CHUNK_ID_MASK) < (
                (seq.oldest - last - 1) & _CHUNK_ID_MASK
            ):
                seq.oldest = chunk_id
        self._oldest_found = True

    def _move_next(self) -> None:
        """Moves the read cursor to the next chunk of its sequence (SequenceIterator::MoveNext)."""
        slot = self._read_slot
        seq = self._read_seq
        if slot < 0 or seq is None:
            return
        fields = self._index.fields
        base = slot * _STRIDE
        chunk_id = self._read_chunk_id
        if chunk_id == seq.last_written or not fields[base + _F_STATE] & _COMPLETE:
            self._read_slot = -1
            return
        following = (chunk_id + 1) & _CHUNK_ID_MASK
        # Leaving a chunk means it is complete and fully read: it joins the read prefix.
        seq.resume = following
        if fields[base + _F_READ] > 0:
            seq.resume_dropped = bool(fields[base + _F_STATE] & _SKIPPED)
            seq.resume_source = chunk_id
        self._read_chunk_id = following
        self._read_slot = self._index.find(_chunk_key(seq.producer_id, seq.writer_id, following))

    def _read_ahead(self) -> tuple[int, list[memoryview]]:
        """Gathers a packet that continues over the next chunks, if all of them are here."""
        seq = self._read_seq
        assert seq is not None
        fields = self._index.fields
        sequence_key = _chunk_key(seq.producer_id, seq.writer_id, 0)
        last_written = seq.last_written
        ahead_id = self._read_chunk_id
        ahead = self._read_slot
        while True:
            if ahead_id == last_written or not fields[ahead * _STRIDE + _F_STATE] & _COMPLETE:
                return _AHEAD_NEXT_SEQUENCE, []
            ahead_id = (ahead_id + 1) & _CHUNK_ID_MASK
            ahead = self._index.find(sequence_key | ahead_id)
            if ahead < 0:
                return _AHEAD_NEXT_SEQUENCE, []
            num_fragments = fields[ahead * _STRIDE + _F_FRAGMENTS]
            if num_fragments == 0:
                continue
            flags = fields[ahead * _STRIDE + _F_FLAGS]
            if not flags & _FIRST_CONTINUES or flags & _NEEDS_PATCHING:
                return _AHEAD_NEXT_SEQUENCE, []
            if num_fragments == 1 and flags & _LAST_CONTINUES:
                continue
            break

        slices: list[memoryview] = []
        corrupted = False
        while True:
            current = self._read_slot
            assert current >= 0
            if fields[current * _STRIDE + _F_FRAGMENTS] > 0:
                corrupted |= not self._read_fragment(current, slices)
            if self._read_chunk_id == ahead_id:
                break
            self._move_next()
        if corrupted:
            return _AHEAD_STAY, []
        return _AHEAD_OK, slices

    def _read_fragment(self, slot: int, slices: list[memoryview] | None) -> bool:
        """Consumes the next fragment of the chunk in `slot`, appending its bytes to `slices`.

        Returns False, having counted it, for a fragment that overruns its chunk.
        """
        fields = self._index.fields
        base = slot * _STRIDE
        if fields[base + _F_READ] >= fields[base + _F_FRAGMENTS]:
            # Only a producer rewriting chunks behind the reader can lead here.
            self._stats.abi_violations += 1
            return False
        record_offset = fields[base + _F_OFFSET]
        record_end = record_offset + fields[base + _F_SIZE]
        payload_start = record_offset + RECORD_HEADER_SIZE
        pos = payload_start + fields[base + _F_CUR]
        if pos < record_end:
            size, start = _fragment_header(self._data, pos, record_end)
        else:
            size, start = 0, pos
        following = start + size
        if following <= pos or following > record_end:
            self._fragment_error(slot, size)
            return False

        fields[base + _F_CUR] = following - payload_start
        fields[base + _F_READ] += 1
        if (
            fields[base + _F_READ] == fields[base + _F_FRAGMENTS]
            and fields[base + _F_STATE] & _COMPLETE
        ):
            self._chunk_read(slot)
        fields[base + _F_STATE] &= ~_SKIPPED
        if size and slices is not None:
            slices.append(self._data[start:following])
        return True

    def _chunk_read(self, slot: int) -> None:
        """Accounts for a complete chunk whose last fragment was just read."""
        fields = self._index.fields
        base = slot * _STRIDE
        self._stats.chunks_read += 1
        self._stats.bytes_read += fields[base + _F_SIZE]
        key = self._index.keys[slot]
        writer = (key >> 48, (key >> 32) & _U16_MAX)
        histogram = self._writer_stats.get(writer)
        if histogram is None:
            histogram = self._writer_stats[writer] = ChunkPayloadHistogram()
        histogram.add(fields[base + _F_CUR])

    def _fragment_error(self, slot: int, size: int) -> None:
        """Counts a fragment that overruns its chunk and gives the chunk up."""
        if size == PACKET_SIZE_DROP_PACKET:
            self._stats.trace_writer_packet_loss += 1
        else:
            self._stats.abi_violations += 1
        self._give_up_chunk(slot)

    def _give_up_chunk(self, slot: int) -> None:
        """Marks a chunk with a bad fragment as fully read so it is never parsed again."""
        fields = self._index.fields
        base = slot * _STRIDE
        fields[base + _F_CUR] = 0
        fields[base + _F_READ] = fields[base + _F_FRAGMENTS]
        if fields[base + _F_STATE] & _COMPLETE:
            self._stats.chunks_read += 1
            self._stats.bytes_read += fields[base + _F_SIZE]
