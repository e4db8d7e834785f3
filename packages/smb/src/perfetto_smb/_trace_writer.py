"""TraceWriter: serializes packets straight into SMB chunks, one writer per thread."""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import TYPE_CHECKING

from protozero import Message, ScatteredStreamWriter, WritableBuffer, write_redundant_varint

from perfetto_smb._abi import PACKET_HEADER_SIZE, PACKET_SIZE_DROP_PACKET, Chunk, ChunkFlags
from perfetto_smb._errors import SmbError
from perfetto_smb._patch_list import Patch
from perfetto_smb._policy import BufferExhaustedPolicy

if TYPE_CHECKING:
    from perfetto_smb._arbiter import SharedMemoryArbiter

MAX_PACKETS_PER_CHUNK = 1022
"""A writer starts a new chunk after this many packets (one below the 10-bit maximum, so the
count can still be inflated by one)."""
GARBAGE_CHUNK_SIZE = 1024
FIELD_PREVIOUS_PACKET_DROPPED = 42
FIELD_FIRST_PACKET_ON_SEQUENCE = 87
DATA_LOSS_SMB_FULL = 1 | 256
"""previous_packet_dropped value: DATA_LOSS_PRESENT | DATA_LOSS_SMB_FULL."""

_EMPTY = bytearray()
_MIN_ROOM_FOR_NEW_PACKET = PACKET_HEADER_SIZE + 8
_ONE_BYTE_SIZE_LIMIT = 128


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
        packet_type: type[Message] = Message,
    ) -> None:
        self._arbiter = arbiter
        self.writer_id = writer_id
        self.target_buffer = target_buffer
        self.policy = policy
        self._smb: WritableBuffer = arbiter.abi.view
        self._garbage = bytearray(GARBAGE_CHUNK_SIZE)
        self._stream = ScatteredStreamWriter(self)
        self._packet = packet_type()
        self._packet.reset(self._stream)
        self._packet.finalize()
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
        self.drop_count = 0
        """How many times the writer started dropping packets."""

    @property
    def next_chunk_id(self) -> int:
        """The chunk id the writer's next chunk will get."""
        return self._next_chunk_id

    def new_trace_packet(self) -> Message:
        """Finishes the previous packet and starts a new one, returned as a root message."""
        packet = self._packet
        if not packet.is_finalized:
            packet.finalize()
            self.finish_trace_packet()
        if self._closed:
            raise SmbError(f"trace writer {self.writer_id} is closed")
        self._finalize_fragment_if_required()
        self._fragmenting_packet = False
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
        offset = stream.reserve_bytes(PACKET_HEADER_SIZE)
        buffer = stream.buffer
        buffer[offset : offset + PACKET_HEADER_SIZE] = b"\0\0\0\0"
        self._size_field = offset if buffer is self._smb else -1
        self._fragment_start = stream.write_ptr
        self._fragmenting_packet = True
        chunk = self._chunk
        if not self._drop_packets and chunk is not None:
            if self._count_inflated:
                count = chunk.packet_count_and_flags()[0]
                self._count_inflated = False
            else:
                count = chunk.increment_packet_count()
            self._reached_max_packets_per_chunk = count == MAX_PACKETS_PER_CHUNK
            if was_dropping:
                packet.append_varint(FIELD_PREVIOUS_PACKET_DROPPED, DATA_LOSS_SMB_FULL)
        if self._first_packet_on_sequence:
            packet.append_bool(FIELD_FIRST_PACKET_ON_SEQUENCE, True)
            self._first_packet_on_sequence = False
        return packet

    def write_packet(self, data: bytes | bytearray | memoryview) -> None:
        """Writes one whole packet whose fields are already encoded in `data`."""
        self.new_trace_packet().append_raw(data)

    def finish_trace_packet(self) -> None:
        """Completes the current packet (finalizing it if needed) without starting another.

        The chunk's packet count is bumped ahead of time so that a service scraping the
        chunk sees the finished packet; the next packet reuses that count.
        """
        packet = self._packet
        if not packet.is_finalized:
            packet.finalize()
        self._finalize_fragment_if_required()
        self._fragmenting_packet = False
        chunk = self._chunk
        if chunk is not None and not self._count_inflated:
            if self._stream.end - self._stream.write_ptr < 1:
                self._return_completed_chunk()
            else:
                self._count_inflated = True
                chunk.increment_packet_count()
        if self._patch_list and self._patch_list[0].is_patched():
            self._arbiter.send_patches(self.writer_id, self.target_buffer, self._patch_list)

    def flush(self, callback: Callable[[], None] | None = None) -> None:
        """Finishes the current packet, hands the current chunk over and commits everything.

        `callback` goes to the arbiter's commit callback with the request.
        """
        self.finish_trace_packet()
        if self._chunk is not None:
            self._return_completed_chunk()
        self._arbiter.flush_pending_commit_data_requests(callback)
        self._stream.reset(_EMPTY, 0, 0)

    def close(self) -> None:
        """Flushes and gives the writer id back; the writer cannot be used afterwards."""
        if self._closed:
            return
        if self._chunk is not None or not self._packet.is_finalized:
            self.flush()
        self._closed = True
        self._arbiter.release_writer_id(self.writer_id)

    def _return_completed_chunk(self) -> None:
        chunk = self._chunk
        if chunk is None:
            return
        if self._count_inflated:
            self._stream.write_byte(0)
            self._count_inflated = False
        self._chunk = None
        self._arbiter.return_completed_chunk(chunk, self.target_buffer, self._patch_list)

    def _finalize_fragment_if_required(self) -> None:
        offset = self._size_field
        if offset < 0:
            return
        self._size_field = -1
        stream = self._stream
        size = stream.write_ptr - self._fragment_start
        buffer = self._smb
        if size < _ONE_BYTE_SIZE_LIMIT and stream.buffer is buffer and offset >= self._range_begin:
            # The packet is whole in this range: move it next to a 1-byte size, like upstream.
            data = offset + PACKET_HEADER_SIZE
            buffer[offset + 1 : offset + 1 + size] = buffer[data : data + size]
            buffer[offset] = size
            stream.write_ptr -= PACKET_HEADER_SIZE - 1
        else:
            write_redundant_varint(buffer, offset, size, PACKET_HEADER_SIZE)

    def _garbage_range(self) -> tuple[WritableBuffer, int, int]:
        self._size_field = -1
        self._fragment_start = 0
        self._range_begin = 0
        return self._garbage, 0, GARBAGE_CHUNK_SIZE

    def get_new_buffer(self) -> tuple[WritableBuffer, int, int]:
        """The next range to write into (the stream writer's delegate interface)."""
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
            ChunkFlags.FIRST_PACKET_CONTINUES_FROM_PREV_CHUNK if fragmenting else 0,
            policy,
        )
        chunk = self._chunk
        if new_chunk is None:
            if fragmenting and chunk is not None:
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
            chunk.set_flag(ChunkFlags.LAST_PACKET_CONTINUES_ON_NEXT_CHUNK)
            if self._size_field >= 0:
                write_redundant_varint(self._smb, self._size_field, size, PACKET_HEADER_SIZE)
            self._detach_nested_size_fields(chunk, to_patches=True)
        if chunk is not None:
            self._return_completed_chunk()
        self._drop_packets = False
        self._reached_max_packets_per_chunk = False
        self._retry_new_chunk_after_packet = False
        self._next_chunk_id = (self._next_chunk_id + 1) & 0xFFFFFFFF
        self._chunk = new_chunk
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
                    chunk.set_flag(ChunkFlags.CHUNK_NEEDS_PATCHING)
                    nested.set_size_field(patch.size_field, 0)
                else:
                    nested.set_size_field(None, 0)
            nested = nested.nested_message
