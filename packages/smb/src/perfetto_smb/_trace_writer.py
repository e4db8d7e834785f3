"""TraceWriter: serializes packets straight into SMB chunks, one writer per thread."""

from __future__ import annotations

import collections
import functools
from bisect import bisect_right
from collections.abc import Callable, Sequence
from itertools import accumulate
from typing import TYPE_CHECKING, Any

try:
    import cython
except ImportError:  # installed without Cython: runs as pure Python
    from protozero import _cython_shim as cython

from perfetto_protos.trace.trace_packet_pbzero import TracePacket
from protozero import ScatteredStreamWriter, WritableBuffer

if not cython.compiled:  # compiled, _trace_writer.pxd cimports it from protozero
    from protozero._proto_utils import write_redundant_varint

from perfetto_smb._abi import PACKET_HEADER_SIZE, PACKET_SIZE_DROP_PACKET, Chunk, ChunkFlags
from perfetto_smb._errors import SmbError
from perfetto_smb._patch_list import Patch
from perfetto_smb._policy import BufferExhaustedPolicy

if TYPE_CHECKING:
    from perfetto_smb._arbiter import SharedMemoryArbiter

if cython.compiled:
    from cython.cimports.cpython.bytes import PyBytes_AS_STRING
    from cython.cimports.cpython.pycapsule import PyCapsule_New
    from cython.cimports.libc.string import memcpy
    from cython.cimports.perfetto_smb._packet_api import (
        PACKET_API_COMMIT,
        PACKET_API_RESERVE,
        commit_packet_fn,
        reserve_packet_fn,
    )


MAX_PACKETS_PER_CHUNK = 1022
"""A writer starts a new chunk after this many packets (one below the 10-bit maximum, so the
count can still be inflated by one)."""
GARBAGE_CHUNK_SIZE = 1024
DATA_LOSS_SMB_FULL = 1 | 256
"""previous_packet_dropped value: DATA_LOSS_PRESENT | DATA_LOSS_SMB_FULL."""

_EMPTY = bytearray()
_NO_HALVES = memoryview(bytearray()).cast("H")
# The flags as plain ints: IntFlag operators run in Python, these in C.
_FIRST_CONTINUES = int(ChunkFlags.FIRST_PACKET_CONTINUES_FROM_PREV_CHUNK)
_LAST_CONTINUES = int(ChunkFlags.LAST_PACKET_CONTINUES_ON_NEXT_CHUNK)
_NEEDS_PATCHING = int(ChunkFlags.CHUNK_NEEDS_PATCHING)
_BLOCK = 4096
"""write_packets() frames this many packets at a time."""
_HEADER_SIZE = PACKET_HEADER_SIZE
_MIN_ROOM_FOR_NEW_PACKET = PACKET_HEADER_SIZE + 8
_ONE_BYTE_SIZE_LIMIT = 127
"""Like upstream, a whole packet gets a 1-byte size only below 127 bytes (127 keeps 4)."""


def _fragment_header(size: int) -> bytes:
    """A packet's fragment header (upstream's framing: one byte below 127, else a 4-byte
    redundant varint)."""
    if size < _ONE_BYTE_SIZE_LIMIT:
        return bytes((size,))
    header = bytearray(PACKET_HEADER_SIZE)
    write_redundant_varint(header, 0, size, PACKET_HEADER_SIZE)
    return bytes(header)


@functools.cache
def _size_tables() -> tuple[list[bytes], list[int]]:
    """For each packet size a chunk can hold: its fragment header and its framed size."""
    headers = [_fragment_header(size) for size in range(1 << 16)]
    return headers, [size + len(header) for size, header in enumerate(headers)]


class TraceWriter:
    """Writes TracePackets of one sequence (one writer id) into chunks of the SMB.

    Use it from one thread at a time. `new_trace_packet()` returns a root protozero message
    that serializes into the current chunk; a packet larger than what is left is split into
    fragments across chunks, and size fields of nested messages left in chunks already handed
    over are sent later as patches. The previous packet is finished by the next
    `new_trace_packet()`, `finish_trace_packet()`, `flush()` or `close()`.
    """

    def __init__(
        self,
        arbiter: SharedMemoryArbiter,
        writer_id: int,
        target_buffer: int,
        policy: BufferExhaustedPolicy,
        packet_type: type[TracePacket] = TracePacket,
    ) -> None:
        self._arbiter = arbiter
        self.writer_id = writer_id
        self.target_buffer = target_buffer
        self.policy = policy
        self._smb: WritableBuffer = arbiter.abi.view
        self._view: WritableBuffer = self._smb
        """The same bytes as `_smb` (compiled: a typed memoryview for native stores)."""
        self._halves = arbiter.abi.halves
        self._count_index = 0
        """Index in `_halves` of the current chunk's packets field."""
        self._garbage = bytearray(GARBAGE_CHUNK_SIZE)
        self._stream = ScatteredStreamWriter(self)
        self._packet = packet_type()
        self._packet.reset(self._stream)
        self._packet.finalize()
        self._packet_open = False
        """Whether the packet was handed out and may not be finalized yet."""
        self._chunk: Chunk | None = None
        self._next_chunk_id = 0
        self._patch_list: collections.deque[Patch] = collections.deque()
        self._range_begin = 0
        self._size_field = -1
        """Offset in the SMB of the current fragment's 4-byte size, or -1 if none."""
        self._fragment_start = 0
        self._fragmenting_packet = False
        self._drop_packets = False
        self._retry_new_chunk_after_packet = False
        self._reached_max_packets_per_chunk = False
        self._count_inflated = False
        self._first_packet_on_sequence = True
        self._closed = False
        self._fast = False
        """Whether `write_packet()` owns the write position: `_ptr` and `_end` are current
        and the stream's `write_ptr` is not (`_leave_fast_path()` puts it back)."""
        self._ptr = 0
        self._end = 0
        self.drop_count = 0
        """How many times the writer started dropping packets."""
        self.packets_lost = 0
        """How many packets the writer dropped (the SMB had no free chunk): each one started
        while dropping, and each one cut short when the SMB ran out under it."""
        self.on_resume: Callable[[], None] | None = None
        """Called (on the writer's thread, inside a write) when the writer gets a chunk again
        after dropping packets: whatever incremental state the sequence had is lost."""

    @property
    def next_chunk_id(self) -> int:
        """The chunk id the writer's next chunk will get."""
        return self._next_chunk_id

    def new_trace_packet(self) -> TracePacket:
        """Finishes the previous packet and starts a new one, returned as a root message."""
        self._leave_fast_path()
        packet = self._packet
        if not packet.is_finalized or self._size_field >= 0:
            self.finish_trace_packet()
        if self._closed:
            raise SmbError(f"trace writer {self.writer_id} is closed")
        was_dropping = self._drop_packets
        stream = self._stream
        if (
            stream.end - stream.write_ptr < _MIN_ROOM_FOR_NEW_PACKET
            or self._reached_max_packets_per_chunk
            or self._retry_new_chunk_after_packet
        ):
            stream.reset(*self.get_new_buffer())
        if self._patch_list and self._patch_list[0].is_patched():
            self._arbiter.send_patches(self.writer_id, self.target_buffer, self._patch_list)
        packet.reset(stream)
        # The room check above (or the fresh range) leaves at least 12 bytes: no need for
        # reserve_bytes() and its range check.
        offset = stream.write_ptr
        data = offset + PACKET_HEADER_SIZE
        stream.write_ptr = data
        buffer = stream.buffer
        buffer[offset:data] = b"\0\0\0\0"
        self._size_field = offset if buffer is self._smb else -1
        self._fragment_start = data
        self._fragmenting_packet = True
        if self._drop_packets:
            self.packets_lost += 1
        elif self._chunk is not None:
            halves = self._halves
            index = self._count_index
            if self._count_inflated:
                self._count_inflated = False
            else:
                halves[index] += 1
            self._reached_max_packets_per_chunk = (halves[index] & 0x3FF) == MAX_PACKETS_PER_CHUNK
            if was_dropping:
                packet.set_previous_packet_dropped(DATA_LOSS_SMB_FULL)
        if self._first_packet_on_sequence:
            packet.set_first_packet_on_sequence(True)
            self._first_packet_on_sequence = False
        self._packet_open = True
        return packet

    def _fast_path_room(self) -> int:
        """Room left in the chunk if the next packet can skip the general path, else -1.

        The general path would: bump the count, write no extra fields and send no patches;
        the fast paths then produce the same chunk headers and fragments (only the bytes past
        the last fragment, which no reader looks at, may differ). 0 when the chunk is full by
        count.
        """
        if (
            self._chunk is None
            or self._size_field >= 0
            or self._first_packet_on_sequence
            or self._patch_list
            or (self._packet_open and not self._packet.is_finalized)
        ):
            return -1
        if self._reached_max_packets_per_chunk:
            return 0
        stream = self._stream
        return stream.end - stream.write_ptr

    def write_packet(self, data: bytes | bytearray | memoryview) -> None:
        """Writes one whole packet whose fields are already encoded in `data`.

        Compiled, a `bytes` packet below 127 bytes that fits in the current chunk costs one
        native copy and no Python object (the fast path other compiled modules call).
        """
        # reserve_packet() and commit_packet() inline: two Python calls cost the pure build
        # about a tenth of an event.
        if type(data) is bytes and (self._fast or self._enter_fast_path()):
            p = self._ptr
            size = len(data)
            room = self._end - p
            if (
                size < _ONE_BYTE_SIZE_LIMIT
                and room >= _MIN_ROOM_FOR_NEW_PACKET
                and room >= size + _HEADER_SIZE
                and not self._reached_max_packets_per_chunk
            ):
                self._view[p] = size
                p += 1
                if cython.compiled:
                    if size:
                        memcpy(cython.address(self._view[p]), PyBytes_AS_STRING(data), size)
                else:
                    self._view[p : p + size] = data
                p += size
                self._ptr = p
                self._account_packets(1, self._end - p)
                return
        self._leave_fast_path()
        if type(data) is bytes and self._fast_path_room() >= 0:
            room_after = self._stream.write_size_prefixed(data, _MIN_ROOM_FOR_NEW_PACKET)
            if room_after >= 0:
                self._account_packets(1, room_after)
                return
        size = len(data)
        room = self._fast_path_room()
        if room < _MIN_ROOM_FOR_NEW_PACKET or room < size + PACKET_HEADER_SIZE:
            self.new_trace_packet().append_raw(data)
            self.finish_trace_packet()
            return
        stream = self._stream
        buffer = self._smb
        p = stream.write_ptr
        if size < _ONE_BYTE_SIZE_LIMIT:
            buffer[p] = size
            p += 1
            end = p + size
            buffer[p:end] = data
        else:
            write_redundant_varint(buffer, p, size, PACKET_HEADER_SIZE)
            p += PACKET_HEADER_SIZE
            end = p + size
            buffer[p:end] = data
        stream.write_ptr = end
        self._account_packets(1, stream.end - end)

    def reserve_packet(self, size: int) -> int:
        """Frames a whole packet of `size` bytes in the current chunk, if that takes no more
        than a copy (below 127 bytes, room left, no other work pending).

        Returns the offset in the SMB where the packet's bytes go, written before
        `commit_packet(size)` and nothing else in between; -1 if the packet must go through
        `write_packet()`.
        """
        if size < _ONE_BYTE_SIZE_LIMIT and (self._fast or self._enter_fast_path()):
            p = self._ptr
            room = self._end - p
            if (
                room >= _MIN_ROOM_FOR_NEW_PACKET
                and room >= size + _HEADER_SIZE
                and not self._reached_max_packets_per_chunk
            ):
                self._view[p] = size
                return p + 1
        return -1

    def commit_packet(self, size: int) -> None:
        """Counts the packet of `size` bytes that `reserve_packet()` framed and the caller
        wrote, as `write_packet()` does."""
        p = self._ptr + 1 + size
        self._ptr = p
        self._account_packets(1, self._end - p)

    def _enter_fast_path(self) -> bool:
        """Takes over the write position if the next packet may skip the general path."""
        if self._fast_path_room() < 0:
            return False
        stream = self._stream
        self._ptr = stream.write_ptr
        self._end = stream.end
        self._fast = True
        return True

    def _leave_fast_path(self) -> None:
        """Gives the write position back to the stream (before anything else uses it)."""
        if self._fast:
            self._fast = False
            self._stream.write_ptr = self._ptr

    def write_packets(
        self, packets: Sequence[bytes | bytearray], *, stop_at_loss: bool = False
    ) -> int:
        """Writes whole packets whose fields are already encoded, in order.

        The chunks get the same headers and fragments as with `write_packet()` on each; runs
        of packets that fit in the current chunk are framed and copied in one go. Returns the
        index of the first packet the writer dropped, or len(packets) if it dropped none;
        with `stop_at_loss` the packets after that one are not written (for packets that
        depend on the incremental state of the ones before them), and a writer that is
        dropping tries for a chunk again at the first packet.
        """
        self._leave_fast_path()
        if stop_at_loss and self._drop_packets:
            self._retry_new_chunk_after_packet = True
        headers, framed_sizes = _size_tables()
        result = len(packets)
        for start in range(0, len(packets), _BLOCK):
            block = packets[start : start + _BLOCK]
            sizes = list(map(len, block))
            try:
                ends = list(accumulate(map(framed_sizes.__getitem__, sizes)))
            except IndexError:  # a packet larger than any chunk: no fast path for this block
                first_lost = -1
                for i, data in enumerate(block):
                    if self._write_one(data) and first_lost < 0:
                        first_lost = i
                        if stop_at_loss:
                            break
            else:
                parts: list[bytes | bytearray] = [b""] * (2 * len(block))
                parts[0::2] = list(map(headers.__getitem__, sizes))
                parts[1::2] = block
                first_lost = self._write_block(block, ends, parts, stop_at_loss)
            if first_lost >= 0 and result == len(packets):
                result = start + first_lost
                if stop_at_loss:
                    break
        return result

    def _write_one(self, data: bytes | bytearray) -> bool:
        """`write_packet(data)`; True if the writer dropped the packet."""
        before = self.packets_lost
        self.write_packet(data)
        return self.packets_lost != before

    def _write_block(
        self,
        block: Sequence[bytes | bytearray],
        ends: list[int],
        parts: list[bytes | bytearray],
        stop_at_loss: bool,
    ) -> int:
        """Writes one block; the index of the first packet dropped, or -1."""
        n = len(block)
        i = 0
        first_lost = -1
        while i < n:
            self._leave_fast_path()  # write_packet() below may have taken the write position
            room = self._fast_path_room()
            if room < _MIN_ROOM_FOR_NEW_PACKET:
                if room >= 0:  # what new_trace_packet() does first: move to a new chunk
                    self._stream.reset(*self.get_new_buffer())
                    continue
                count = 0
            else:
                before = ends[i - 1] if i else 0
                written = (self._halves[self._count_index] & 0x3FF) - self._count_inflated
                limit = min(n, i + MAX_PACKETS_PER_CHUNK - written)
                count = bisect_right(ends, before + room - _MIN_ROOM_FOR_NEW_PACKET, i, limit) - i
            if count == 0:
                if self._write_one(block[i]) and first_lost < 0:
                    first_lost = i
                    if stop_at_loss:
                        return first_lost
                i += 1
                continue
            stream = self._stream
            smb = self._smb
            p = stream.write_ptr
            end = p + ends[i + count - 1] - before
            smb[p:end] = b"".join(parts[2 * i : 2 * (i + count)])
            stream.write_ptr = end
            self._account_packets(count, stream.end - end)
            i += count
        return first_lost

    def _account_packets(self, count: int, room_after: int) -> None:
        """Counts `count` packets just written whole in the chunk, as the general path does."""
        halves = self._halves
        index = self._count_index
        if self._count_inflated:
            count -= 1
        value = halves[index] + count
        self._reached_max_packets_per_chunk = (value & 0x3FF) == MAX_PACKETS_PER_CHUNK
        if room_after >= 1:
            value += 1
            self._count_inflated = True
        else:
            self._count_inflated = False
        halves[index] = value
        if room_after < 1:
            self._return_completed_chunk()

    def finish_trace_packet(self) -> None:
        """Completes the current packet (finalizing it if needed) without starting another.

        The chunk's packet count is bumped ahead of time so that a service scraping the
        chunk sees the finished packet; the next packet reuses that count.
        """
        self._leave_fast_path()
        packet = self._packet
        if not packet.is_finalized:
            packet.finalize()
        self._packet_open = False
        stream = self._stream
        offset = self._size_field
        if offset >= 0:  # write the size of the packet's last fragment
            self._size_field = -1
            size = stream.write_ptr - self._fragment_start
            buffer = self._smb
            if size < _ONE_BYTE_SIZE_LIMIT and offset >= self._range_begin:
                # The packet is whole in this range: move it next to a 1-byte size, like
                # upstream.
                data = offset + PACKET_HEADER_SIZE
                buffer[offset + 1 : offset + 1 + size] = buffer[data : data + size]
                buffer[offset] = size
                stream.write_ptr -= PACKET_HEADER_SIZE - 1
            else:
                write_redundant_varint(buffer, offset, size, PACKET_HEADER_SIZE)
        self._fragmenting_packet = False
        if self._chunk is not None and not self._count_inflated:
            if stream.end - stream.write_ptr < 1:
                self._return_completed_chunk()
            else:
                self._count_inflated = True
                self._halves[self._count_index] += 1
        if self._patch_list and self._patch_list[0].is_patched():
            self._arbiter.send_patches(self.writer_id, self.target_buffer, self._patch_list)

    def flush(self, callback: Callable[[], None] | None = None) -> None:
        """Finishes the current packet, hands the current chunk over and commits everything.

        `callback` goes to the arbiter's commit callback with the request.
        """
        self._leave_fast_path()
        self.finish_trace_packet()
        if self._chunk is not None:
            self._return_completed_chunk()
        self._arbiter.flush_pending_commit_data_requests(callback)
        self._stream.reset(_EMPTY, 0, 0)

    def close(self) -> None:
        """Flushes and gives the writer id back; the writer cannot be used afterwards."""
        self._leave_fast_path()
        if self._closed:
            return
        if self._chunk is not None or not self._packet.is_finalized:
            self.flush()
        self._closed = True
        self._arbiter.release_writer_id(self.writer_id)

    def detach_buffer(self) -> None:
        """Stops pointing into the SMB (its mapping is going away); nothing is written after."""
        self._fast = False
        self._view = _EMPTY
        self._stream.reset(_EMPTY, 0, 0)
        self._halves = _NO_HALVES
        self._chunk = None
        self._closed = True

    def _return_completed_chunk(self) -> None:
        self._leave_fast_path()
        chunk = self._chunk
        if chunk is None:
            return
        if self._count_inflated:
            self._stream.write_byte(0)
            self._count_inflated = False
        self._chunk = None
        self._arbiter.return_completed_chunk(chunk, self.target_buffer, self._patch_list)

    def _garbage_range(self) -> tuple[WritableBuffer, int, int]:
        self._size_field = -1
        self._fragment_start = 0
        self._range_begin = 0
        return self._garbage, 0, GARBAGE_CHUNK_SIZE

    def get_new_buffer(self) -> tuple[WritableBuffer, int, int]:
        """The next range to write into (the stream writer's delegate interface)."""
        self._leave_fast_path()
        if self._fragmenting_packet and self._drop_packets:
            self._retry_new_chunk_after_packet = True
            return self._garbage_range()
        fragmenting = self._fragmenting_packet
        policy = self.policy
        if policy is BufferExhaustedPolicy.STALL_THEN_DROP and self._drop_packets:
            policy = BufferExhaustedPolicy.DROP
        new_chunk = self._arbiter.get_new_chunk(
            self.writer_id,
            self._next_chunk_id,
            1 if fragmenting else 0,
            _FIRST_CONTINUES if fragmenting else 0,
            policy,
        )
        chunk = self._chunk
        if new_chunk is None:
            if fragmenting and chunk is not None:
                self.packets_lost += 1  # begun in a chunk: its fragments there are dropped too
                if self._size_field >= 0:
                    write_redundant_varint(
                        self._smb, self._size_field, PACKET_SIZE_DROP_PACKET, PACKET_HEADER_SIZE
                    )
                self._detach_nested_size_fields(chunk, to_patches=False)
            if chunk is not None:
                self._return_completed_chunk()
            if not self._drop_packets:
                self.drop_count += 1
            self._drop_packets = True
            self._count_inflated = False
            self._reached_max_packets_per_chunk = False
            self._retry_new_chunk_after_packet = False
            return self._garbage_range()
        if fragmenting and chunk is not None:
            size = self._stream.write_ptr - self._fragment_start
            chunk.set_flag(_LAST_CONTINUES)
            if self._size_field >= 0:
                write_redundant_varint(self._smb, self._size_field, size, PACKET_HEADER_SIZE)
            self._detach_nested_size_fields(chunk, to_patches=True)
        if chunk is not None:
            self._return_completed_chunk()
        if self._drop_packets and self.on_resume is not None:
            self.on_resume()
        self._drop_packets = False
        self._reached_max_packets_per_chunk = False
        self._retry_new_chunk_after_packet = False
        self._next_chunk_id = (self._next_chunk_id + 1) & 0xFFFFFFFF
        self._chunk = new_chunk
        self._count_index = (new_chunk.begin + 6) >> 1
        self._count_inflated = False
        begin = new_chunk.payload_begin
        if fragmenting:
            self._size_field = begin
            self._smb[begin : begin + PACKET_HEADER_SIZE] = b"\0\0\0\0"
            begin += PACKET_HEADER_SIZE
            self._fragment_start = begin
        else:
            self._size_field = -1
        self._range_begin = begin
        return self._smb, begin, new_chunk.end

    def _detach_nested_size_fields(self, chunk: Chunk, *, to_patches: bool) -> None:
        """Moves the open nested messages' size fields out of `chunk` (into patches or nowhere)."""
        smb = self._smb
        low = chunk.payload_begin
        high = chunk.end - PACKET_HEADER_SIZE
        nested = self._packet.nested_message
        while nested is not None:
            offset = nested.size_field_offset
            if nested.size_field_buffer is smb and low <= offset <= high:
                if to_patches:
                    patch = Patch(chunk.chunk_id, offset - low)
                    self._patch_list.append(patch)
                    chunk.set_flag(_NEEDS_PATCHING)
                    nested.set_size_field(patch.size_field, 0)
                else:
                    nested.set_size_field(None, 0)
            nested = nested.nested_message


def _native_reserve_packet(writer: TraceWriter, size: int) -> Any:
    """`writer.reserve_packet(size)` for C callers: the address where the packet's bytes go,
    NULL if it must go through `write_packet()` (compiled build only)."""
    p = writer.reserve_packet(size)
    if p < 0:
        return cython.NULL
    return cython.address(writer._view[p])


def _native_commit_packet(writer: TraceWriter, size: int) -> int:
    """`writer.commit_packet(size)` for C callers: 0, or -1 with an exception set (compiled
    build only)."""
    writer.commit_packet(size)
    return 0


NATIVE_PACKET_API: tuple[object, object] | None = None
"""Compiled: capsules of `_native_reserve_packet` and `_native_commit_packet`, for compiled
callers that write packets straight into the chunk without importing this module at their own
import (perfetto_client); their names and C signatures are `_packet_api.pxd`'s. None in the
pure build."""
if cython.compiled:
    NATIVE_PACKET_API = (
        PyCapsule_New(
            cython.cast(cython.p_void, cython.cast(reserve_packet_fn, _native_reserve_packet)),
            PACKET_API_RESERVE,
            cython.NULL,
        ),
        PyCapsule_New(
            cython.cast(cython.p_void, cython.cast(commit_packet_fn, _native_commit_packet)),
            PACKET_API_COMMIT,
            cython.NULL,
        ),
    )
