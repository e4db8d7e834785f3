"""Test helpers: deterministic test packets and a service-like reassembler of chunks."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from dataclasses import dataclass, field

from perfetto_protos.common.commit_data_request_pb2 import CommitDataRequest
from perfetto_smb import (
    ChunkFlags,
    CopiedChunk,
    SharedMemoryReader,
    apply_patch,
    parse_chunk_payload,
)
from protozero import WIRE_TYPE_LENGTH_DELIMITED, HeapBuffered, Message, ProtoDecoder, read_varint


def run_probe(
    source: str, env: dict[str, str], timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Runs `source` in a fresh interpreter with `env` in place of any PERFETTO_PY_* setting."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PERFETTO_PY_")}
    return subprocess.run(
        [sys.executable, "-c", source],
        env={**clean, **env},
        capture_output=True,
        text=True,
        check=True,
        timeout=timeout,
    )


# Fields the TraceWriter itself may put first in a packet.
PREVIOUS_PACKET_DROPPED_PREFIX = bytes([0xD0, 0x02, 0x81, 0x02])  # f42 = 257
FIRST_PACKET_ON_SEQUENCE_PREFIX = bytes([0xB8, 0x05, 0x01])  # f87 = true


class StreamPacket(Message):
    """A stand-in TracePacket: f1 stream id, f2 sequence number, f3 nested payload."""

    __slots__ = ()


class Nested(Message):
    """A nested message: f1 bytes, f2 a deeper Nested."""

    __slots__ = ()


def fill_packet(packet: Message, stream: int, seq: int, max_size: int) -> None:
    """Writes the packet for (stream, seq): sizes and nesting drawn from a seeded RNG."""
    rng = random.Random(stream * 1_000_003 + seq)
    packet.append_varint(1, stream)
    packet.append_varint(2, seq)
    size = rng.choice((rng.randint(0, 40), rng.randint(0, 300), rng.randint(0, max_size)))
    depth = rng.randint(0, 3)
    node = packet.begin_nested_message(3, Nested)
    for level in range(depth):
        node.append_bytes(1, bytes([(seq + level) & 0xFF]) * (size // (depth + 1)))
        node = node.begin_nested_message(2, Nested)
    node.append_bytes(1, rng.randbytes(size // (depth + 1)))
    packet.append_varint(4, seq ^ 0x5A5A)


def expected_packet(stream: int, seq: int, max_size: int) -> bytes:
    """The bytes `fill_packet` writes, serialized on the heap."""
    heap = HeapBuffered(StreamPacket)
    fill_packet(heap.msg, stream, seq, max_size)
    return heap.serialize()


def canonical_packet(data: bytes) -> list[tuple[int, object]]:
    """A packet's fields with its nested messages decoded: equal whatever width each nested
    size field got (1 byte when compacted, 4 when the message was split across chunks)."""

    def fields(buf: bytes | memoryview, nested_ids: frozenset[int]) -> list[tuple[int, object]]:
        out: list[tuple[int, object]] = []
        for item in ProtoDecoder(buf):
            if item.type == WIRE_TYPE_LENGTH_DELIMITED and item.id in nested_ids:
                out.append((item.id, fields(item.as_bytes(), frozenset((2,)))))
            elif item.type == WIRE_TYPE_LENGTH_DELIMITED:
                out.append((item.id, bytes(item.as_bytes())))
            else:
                out.append((item.id, item.as_uint64()))
        return out

    return fields(data, frozenset((3,)))


@dataclass
class ReceivedPacket:
    """A reassembled packet with the TraceWriter's own leading fields taken off."""

    stream: int
    seq: int
    body: bytes
    dropped_before: bool
    first_on_sequence: bool


def split_packet(data: bytes) -> ReceivedPacket:
    """Strips f42/f87 prefixes and reads the stream id and sequence number."""
    dropped = first = False
    while True:
        if data.startswith(PREVIOUS_PACKET_DROPPED_PREFIX):
            dropped = True
            data = data[len(PREVIOUS_PACKET_DROPPED_PREFIX) :]
        elif data.startswith(FIRST_PACKET_ON_SEQUENCE_PREFIX):
            first = True
            data = data[len(FIRST_PACKET_ON_SEQUENCE_PREFIX) :]
        else:
            break
    assert data[0] == 0x08, data[:8].hex()
    stream, offset = read_varint(data, 1, len(data))
    assert offset > 0
    assert data[offset] == 0x10
    seq, end = read_varint(data, offset + 1, len(data))
    assert end > 0
    return ReceivedPacket(stream, seq, data, dropped, first)


@dataclass
class _StoredChunk:
    payload: bytearray
    count: int
    flags: int
    needs_patching: bool


@dataclass
class WriterSequence:
    """Chunks of one writer, consumed in chunk-id order once patched; packets reassembled."""

    next_chunk_id: int = 0
    chunks: dict[int, _StoredChunk] = field(default_factory=dict)
    pending: bytearray | None = None
    packets: list[bytes] = field(default_factory=list)
    aborted: int = 0
    errors: list[str] = field(default_factory=list)

    def add_chunk(self, chunk: CopiedChunk) -> None:
        if chunk.chunk_id in self.chunks or chunk.chunk_id < self.next_chunk_id:
            self.errors.append(f"chunk {chunk.chunk_id} received twice")
            return
        self.chunks[chunk.chunk_id] = _StoredChunk(
            bytearray(chunk.payload),
            chunk.packet_count,
            chunk.flags,
            bool(chunk.flags & ChunkFlags.CHUNK_NEEDS_PATCHING),
        )
        self.drain()

    def patch(self, chunk_to_patch: CommitDataRequest.ChunkToPatch) -> None:
        stored = self.chunks.get(chunk_to_patch.chunk_id)
        if stored is None:
            self.errors.append(f"patch for chunk {chunk_to_patch.chunk_id} not held")
            return
        for entry in chunk_to_patch.patches:
            if not apply_patch(stored.payload, entry.offset, entry.data):
                self.errors.append(f"bad patch {entry.offset} {entry.data.hex()}")
        if not chunk_to_patch.has_more_patches:
            stored.needs_patching = False
        self.drain()

    def drain(self) -> None:
        while True:
            stored = self.chunks.get(self.next_chunk_id)
            if stored is None or stored.needs_patching:
                return
            del self.chunks[self.next_chunk_id]
            self.next_chunk_id += 1
            self._consume(stored)

    def _consume(self, stored: _StoredChunk) -> None:
        parsed = parse_chunk_payload(stored.payload, stored.count, stored.flags)
        if parsed.error:
            self.errors.append(parsed.error)
        fragments = parsed.fragments
        for index, fragment in enumerate(fragments):
            continues_previous = index == 0 and parsed.first_continues
            if continues_previous:
                if self.pending is None:
                    self.errors.append("continuation without a start")
                    continue
                self.pending += fragment
            else:
                if self.pending is not None:
                    self.errors.append("packet start while another is open")
                self.pending = bytearray(fragment)
            if not (index == len(fragments) - 1 and parsed.last_continues):
                if self.pending:
                    self.packets.append(bytes(self.pending))
                self.pending = None
        if parsed.writer_aborted:
            self.aborted += 1
            self.pending = None


class Reassembler:
    """Applies CommitDataRequests to an SMB reader, like the service does, per writer."""

    def __init__(self, reader: SharedMemoryReader) -> None:
        self.reader = reader
        self.writers: dict[int, WriterSequence] = {}

    def commit(self, request: CommitDataRequest) -> None:
        for move in request.chunks_to_move:
            if move.HasField("data"):
                chunk = self.reader.chunk_from_bytes(move.chunk, move.data)
            else:
                chunk = self.reader.read_chunk(move.page, move.chunk)
            if chunk is not None:
                self.writers.setdefault(chunk.writer_id, WriterSequence()).add_chunk(chunk)
        for chunk_to_patch in request.chunks_to_patch:
            sequence = self.writers.setdefault(chunk_to_patch.writer_id, WriterSequence())
            sequence.patch(chunk_to_patch)
