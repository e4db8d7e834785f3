"""The chunks a CommitData request moves: from a producer's SMB (or the request) into buffers.

The request is read in its serialized form: its fields are decoded as they are walked and
each chunk is moved as its entry ends, with no message object. The walk reads protobuf's
wire format as protobuf does for every field it meets (unknown fields skipped, the last
value of a scalar kept, a known field with another wire type taken as unknown); a request
with anything else (group wire types, a varint beyond 64 bits, field 0, a field running
past its message) is left to protobuf: `commit_data_request` decodes it with protobuf, which
either refuses it or gives the same request re-encoded in the layout the walk reads. The pure
build reads the request with protobuf's parser instead (in C, it costs less than the walk in
Python) and moves the chunks the same way; `decode_commit_data` is the walk in both builds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

try:
    import cython
except ImportError:  # installed without Cython: runs as pure Python
    from protozero import _cython_shim as cython

from google.protobuf.message import DecodeError
from perfetto_protos.common.commit_data_request_pb2 import CommitDataRequest

from perfetto_service.core._trace_buffer import Patch

if not cython.compiled:  # mypy checks the pure build's names
    from perfetto_protos.tags import fields as tags
    from protozero import read_varint
else:
    from cython.cimports.perfetto_protos.tags import fields_c as tags  # type: ignore[no-redef]
    from cython.cimports.protozero._varint import read_varint  # type: ignore[no-redef]

if not cython.compiled:  # compiled, the .pxd cimports them
    from perfetto_smb import SharedMemoryReader

    from perfetto_service.core._trace_buffer import TraceBuffer

if TYPE_CHECKING:
    from perfetto_service.core._producer_endpoint import ProducerEndpointImpl
    from perfetto_service.core._trace_buffer import PacketSequenceProperties

Buffer = bytes | bytearray | memoryview

ChunkPatches = tuple[int, int, int, list[Patch], bool]
"""One ChunkToPatch entry: (target_buffer, writer_id, chunk_id, patches, has_more_patches)."""

ChunkMove = tuple[int, int, int, bytes | None, bool]
"""One ChunksToMove entry: (page, chunk, target_buffer, data or None, not chunk_incomplete)."""

_UINT32_MASK = 0xFFFFFFFF
_MAX_TAG = 0xFFFFFFFF
_MAX_VARINT_BYTES = 10
_BAD = 1 << 62
"""Where a walk's position goes when the request is not in the layout it reads: past any end."""

# What a walk does with the request.
_CHECK = 0
_DECODE = 1
_MOVE = 2

# Wire types.
_VARINT = 0
_FIXED64 = 1
_BYTES = 2
_FIXED32 = 5


def target_buffer(
    buffers: dict[int, TraceBuffer],
    endpoint: ProducerEndpointImpl,
    buffer_id: int,
    writer_id: int,
) -> TraceBuffer | None:
    """The buffer `buffer_id`, if the producer's writer may write there; else None.

    It may if the buffer exists, belongs to a session the producer serves, and is the one the
    writer registered (when it registered one).
    """
    buffer = buffers.get(buffer_id)
    registered_buffer = endpoint.writers.get(writer_id)
    if (
        buffer is None
        or buffer_id not in endpoint.allowed_target_buffers
        or (registered_buffer is not None and registered_buffer != buffer_id)
    ):
        return None
    return buffer


def commit_data_request(request: Buffer) -> Buffer:
    """A serialized CommitDataRequest in the layout `move_chunks` reads: `request` itself, or
    the request re-encoded by protobuf. Raises `DecodeError` if protobuf cannot decode it.
    """
    if cython.compiled and _CommitWalk(request, _CHECK, None, None, None).walk():
        return request
    message = CommitDataRequest.FromString(bytes(request))
    if not cython.compiled:
        return request  # the pure build's move_chunks reads it with protobuf too
    message.DiscardUnknownFields()
    return message.SerializeToString()


def move_chunks(
    buffers: dict[int, TraceBuffer],
    endpoint: ProducerEndpointImpl,
    reader: SharedMemoryReader,
    request: Buffer,
) -> tuple[int, list[ChunkPatches], int]:
    """Moves the chunks of a serialized CommitDataRequest into their target buffers.

    Returns (chunks discarded, the request's chunks_to_patch, its flush_request_id). A chunk
    is taken from the producer's SMB, where it is freed, or from the entry's `data`
    (emulation mode). Nothing in `request` nor in the SMB is trusted: a chunk that cannot be
    read, or whose writer may not write to its target buffer, is discarded. A chunk whose page
    the producer changed while it was copied stays in the buffer (its bytes are checked like
    any others) and is counted in `reader.rejected`. `request` comes from
    `commit_data_request` (else `DecodeError` if it is not in the layout read, with nothing
    moved).
    """
    walk = _CommitWalk(request, _MOVE, buffers, endpoint, reader)
    if not cython.compiled:
        # Pure Python, protobuf's parser (C in upb) costs less than the walk.
        message = CommitDataRequest.FromString(bytes(request))
        for move in message.chunks_to_move:
            data = move.data if move.HasField("data") else None
            walk._move(move.page, move.chunk, move.target_buffer, data, not move.chunk_incomplete)
        patches: list[ChunkPatches] = [
            (
                entry.target_buffer,
                entry.writer_id,
                entry.chunk_id,
                [Patch(patch.offset, patch.data) for patch in entry.patches],
                entry.has_more_patches,
            )
            for entry in message.chunks_to_patch
        ]
        return walk.discarded, patches, message.flush_request_id
    if not _CommitWalk(request, _CHECK, None, None, None).walk():
        raise DecodeError("CommitDataRequest not in the layout the chunk mover reads")
    walk.walk()
    return walk.discarded, walk.patches, walk.flush_request_id


def decode_commit_data(
    request: Buffer,
) -> tuple[list[ChunkMove], list[ChunkPatches], int] | None:
    """The fields `move_chunks` reads from `request`: (chunks_to_move, chunks_to_patch,
    flush_request_id), or None if it is not in the layout the walk reads.
    """
    walk = _CommitWalk(request, _DECODE, None, None, None)
    if not walk.walk():
        return None
    return walk.moves, walk.patches, walk.flush_request_id


class _CommitWalk:
    """One walk over a serialized CommitDataRequest: checks its layout or, given the
    service's buffers, moves its chunks and collects its patches.
    """

    def __init__(
        self,
        request: Buffer,
        mode: int,
        buffers: dict[int, TraceBuffer] | None,
        endpoint: ProducerEndpointImpl | None,
        reader: SharedMemoryReader | None,
    ) -> None:
        self.request = request
        self.buf = request
        self.pos = 0
        self.buffers = buffers
        self.endpoint = endpoint
        self.reader = reader
        self.mode = mode
        self.discarded = 0
        self.moves: list[ChunkMove] = []
        self.patches: list[ChunkPatches] = []
        self.flush_request_id = 0
        self.last_buffer_id = -1
        self.last_writer_id = -1
        self.target: TraceBuffer | None = None
        self.sequence: PacketSequenceProperties | None = None

    def walk(self) -> bool:
        """Walks the whole request; False if it is not in the layout this walk reads."""
        end = len(self.buf)
        while self.pos < end:
            tag = self._varint(end)
            if tag == tags.CommitDataRequest_chunks_to_move_TAG:
                self._chunk_to_move(self._message_end(end))
            elif tag == tags.CommitDataRequest_chunks_to_patch_TAG:
                self._chunk_to_patch(self._message_end(end))
            elif tag == tags.CommitDataRequest_flush_request_id_TAG:
                self.flush_request_id = self._varint(end)
            else:
                self._skip(tag, end)
        return self.pos == end

    def _varint(self, end: int) -> int:
        """The varint at `pos` (which moves past it); `pos` goes to `_BAD` unless it fits in
        64 bits."""
        pos = self.pos
        if pos < end and self.buf[pos] < 0x80:
            self.pos = pos + 1
            return self.buf[pos]
        value: int
        value, after = read_varint(self.buf, pos, end)
        # A 10-byte varint holds 64 bits if its last byte is 0 or 1.
        if after < 0 or (after - pos == _MAX_VARINT_BYTES and self.buf[after - 1] > 1):
            self.pos = _BAD
            return 0
        self.pos = after
        return value

    def _message_end(self, end: int) -> int:
        """The end of the length-delimited field whose length is at `pos`."""
        length = self._varint(end)
        if self.pos > end:
            return _BAD
        room = end - self.pos
        if length > room:
            self.pos = _BAD
            return _BAD
        return self.pos + length

    def _skip(self, tag: int, end: int) -> None:
        """Skips the value of an unknown field; `pos` goes to `_BAD` for what protobuf must
        decide."""
        wire_type = tag & 7
        if tag >> 3 == 0 or tag > _MAX_TAG:
            self.pos = _BAD
        elif wire_type == _VARINT:
            self._varint(end)
        elif wire_type == _BYTES:
            self.pos = self._message_end(end)
        elif wire_type == _FIXED64 and end - self.pos >= 8:
            self.pos += 8
        elif wire_type == _FIXED32 and end - self.pos >= 4:
            self.pos += 4
        else:
            self.pos = _BAD

    def _chunk_to_move(self, end: int) -> None:
        page = chunk = buffer_id = 0
        data_start = data_end = -1
        complete = True
        while self.pos < end:
            tag = self._varint(end)
            if tag == tags.CommitDataRequest_ChunksToMove_page_TAG:
                page = self._varint(end) & _UINT32_MASK
            elif tag == tags.CommitDataRequest_ChunksToMove_chunk_TAG:
                chunk = self._varint(end) & _UINT32_MASK
            elif tag == tags.CommitDataRequest_ChunksToMove_target_buffer_TAG:
                buffer_id = self._varint(end) & _UINT32_MASK
            elif tag == tags.CommitDataRequest_ChunksToMove_data_TAG:
                data_end = self._message_end(end)
                data_start = self.pos
                self.pos = data_end
            elif tag == tags.CommitDataRequest_ChunksToMove_chunk_incomplete_TAG:
                complete = self._varint(end) == 0
            else:
                self._skip(tag, end)
        if self.pos != end or end == _BAD:
            self.pos = _BAD
        elif self.mode == _MOVE:
            data = bytes(self.request[data_start:data_end]) if data_start >= 0 else None
            self._move(page, chunk, buffer_id, data, complete)
        elif self.mode == _DECODE:
            data = bytes(self.request[data_start:data_end]) if data_start >= 0 else None
            self.moves.append((page, chunk, buffer_id, data, complete))

    def _move(
        self, page: int, chunk: int, buffer_id: int, data: bytes | None, complete: bool
    ) -> None:
        """Moves one chunk: from the SMB, or from `data` (emulation mode)."""
        reader = self.reader
        assert reader is not None
        opened = False
        if data is not None:
            copied = reader.chunk_from_bytes(chunk, data, complete=complete)
            if copied is None:
                self.discarded += 1
                return
            writer_id = copied.writer_id
        else:
            copied = None
            opened = reader._begin_chunk(page, chunk)
            if not opened:
                self.discarded += 1
                return
            writer_id = reader._writer_id
        if buffer_id != self.last_buffer_id or writer_id != self.last_writer_id:
            assert self.buffers is not None
            assert self.endpoint is not None
            self.target = target_buffer(self.buffers, self.endpoint, buffer_id, writer_id)
            if self.target is not None:
                self.sequence = self.endpoint.sequence(writer_id)
            self.last_buffer_id = buffer_id
            self.last_writer_id = writer_id
        buffer = self.target
        try:
            if buffer is None:
                self.discarded += 1
            elif copied is not None:
                assert self.sequence is not None
                buffer._copy_chunk(
                    self.sequence,
                    copied.chunk_id,
                    copied.packet_count,
                    copied.flags,
                    copied.payload,
                    copied.complete,
                )
            elif opened:
                assert self.sequence is not None
                buffer._copy_chunk(
                    self.sequence,
                    reader._chunk_id,
                    reader._packet_count,
                    reader._flags,
                    reader._chunk_payload(),
                    True,
                )
        finally:
            if opened:
                reader.close_chunk()

    def _chunk_to_patch(self, end: int) -> None:
        buffer_id = writer_id = chunk_id = 0
        has_more = False
        patches: list[Patch] = []
        while self.pos < end:
            tag = self._varint(end)
            if tag == tags.CommitDataRequest_ChunkToPatch_target_buffer_TAG:
                buffer_id = self._varint(end) & _UINT32_MASK
            elif tag == tags.CommitDataRequest_ChunkToPatch_writer_id_TAG:
                writer_id = self._varint(end) & _UINT32_MASK
            elif tag == tags.CommitDataRequest_ChunkToPatch_chunk_id_TAG:
                chunk_id = self._varint(end) & _UINT32_MASK
            elif tag == tags.CommitDataRequest_ChunkToPatch_patches_TAG:
                self._patch(self._message_end(end), patches)
            elif tag == tags.CommitDataRequest_ChunkToPatch_has_more_patches_TAG:
                has_more = self._varint(end) != 0
            else:
                self._skip(tag, end)
        if self.pos != end or end == _BAD:
            self.pos = _BAD
        elif self.mode != _CHECK:
            self.patches.append((buffer_id, writer_id, chunk_id, patches, has_more))

    def _patch(self, end: int, patches: list[Patch]) -> None:
        offset = 0
        data_start = data_end = 0
        while self.pos < end:
            tag = self._varint(end)
            if tag == tags.CommitDataRequest_ChunkToPatch_Patch_offset_TAG:
                offset = self._varint(end) & _UINT32_MASK
            elif tag == tags.CommitDataRequest_ChunkToPatch_Patch_data_TAG:
                data_end = self._message_end(end)
                data_start = self.pos
                self.pos = data_end
            else:
                self._skip(tag, end)
        if self.pos != end or end == _BAD:
            self.pos = _BAD
        elif self.mode != _CHECK:
            patches.append(Patch(offset, bytes(self.request[data_start:data_end])))
