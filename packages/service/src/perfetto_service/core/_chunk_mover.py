"""The chunks a CommitData request moves: from a producer's SMB (or the request) into buffers."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

try:
    import cython
except ImportError:  # installed without Cython: runs as pure Python
    from protozero import _cython_shim as cython

from perfetto_protos.common.commit_data_request_pb2 import CommitDataRequest

if not cython.compiled:  # compiled, the .pxd cimports them
    from perfetto_smb import SharedMemoryReader

    from perfetto_service.core._trace_buffer import TraceBuffer

if TYPE_CHECKING:
    from perfetto_smb import CopiedChunk

    from perfetto_service.core._producer_endpoint import ProducerEndpointImpl
    from perfetto_service.core._trace_buffer import PacketSequenceProperties


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


def move_chunks(
    buffers: dict[int, TraceBuffer],
    endpoint: ProducerEndpointImpl,
    reader: SharedMemoryReader,
    moves: Iterable[CommitDataRequest.ChunksToMove],
) -> int:
    """Copies each chunk of `moves` into its target buffer; returns how many were discarded.

    A chunk is taken from the producer's SMB, where it is freed, or from the entry's `data`
    (emulation mode). Nothing in `moves` nor in the SMB is trusted: a chunk that cannot be
    read, or whose writer may not write to its target buffer, is discarded. A chunk whose page
    the producer changed while it was copied stays in the buffer (its bytes are checked like
    any others) and is counted in `reader.rejected`.
    """
    discarded = 0
    last_buffer_id = last_writer_id = -1
    target: tuple[TraceBuffer, PacketSequenceProperties] | None = None
    for move in moves:
        data = move.data
        chunk: CopiedChunk | None = None
        opened: tuple[int, int, int, int, memoryview] | None = None
        if data or move.HasField("data"):
            chunk = reader.chunk_from_bytes(move.chunk, data, complete=not move.chunk_incomplete)
            if chunk is None:
                discarded += 1
                continue
            writer_id = chunk.writer_id
        else:
            opened = reader.open_chunk(move.page, move.chunk)
            if opened is None:
                discarded += 1
                continue
            writer_id = opened[0]
        buffer_id = move.target_buffer
        if buffer_id != last_buffer_id or writer_id != last_writer_id:
            buffer = target_buffer(buffers, endpoint, buffer_id, writer_id)
            target = None if buffer is None else (buffer, endpoint.sequence(writer_id))
            last_buffer_id = buffer_id
            last_writer_id = writer_id
        try:
            if target is None:
                discarded += 1
                continue
            buffer = target[0]
            if chunk is not None:
                buffer._copy_chunk(
                    target[1],
                    chunk.chunk_id,
                    chunk.packet_count,
                    chunk.flags,
                    chunk.payload,
                    chunk.complete,
                )
            elif opened is not None:
                _, chunk_id, packet_count, flags, payload = opened
                buffer._copy_chunk(target[1], chunk_id, packet_count, flags, payload, True)
        finally:
            if opened is not None:
                reader.close_chunk()
    return discarded
