"""Test helpers: chunks packed the way upstream's TraceWriter packs them."""

from __future__ import annotations

from dataclasses import dataclass, field

from perfetto_service.core._trace_buffer import PacketSequenceProperties, TraceBuffer
from perfetto_smb import ChunkFlags
from protozero import write_redundant_varint

FIRST = int(ChunkFlags.FIRST_PACKET_CONTINUES_FROM_PREV_CHUNK)
LAST = int(ChunkFlags.LAST_PACKET_CONTINUES_ON_NEXT_CHUNK)
PATCH = int(ChunkFlags.CHUNK_NEEDS_PATCHING)


def redundant4(size: int) -> bytes:
    """A 4-byte redundant varint, as TraceWriter writes fragment sizes."""
    out = bytearray(4)
    write_redundant_varint(out, 0, size)
    return bytes(out)


def fragment(data: bytes) -> bytes:
    """One fragment: its 4-byte size then its bytes."""
    return redundant4(len(data)) + data


def seq(
    producer: int = 1, writer: int = 1, uid: int = 1000, pid: int | None = 4242
) -> PacketSequenceProperties:
    """Sequence properties with defaults."""
    return PacketSequenceProperties(producer, uid, pid, writer)


@dataclass
class Chunk:
    """A chunk ready for `TraceBuffer.copy_chunk_untrusted`."""

    chunk_id: int
    num_fragments: int
    flags: int
    payload: bytes


@dataclass
class ChunkPacker:
    """Splits a writer's packets into fixed-size chunks, fragmenting packets across them."""

    payload_size: int
    first_chunk_id: int = 0
    chunks: list[Chunk] = field(default_factory=list)
    _open: bytearray = field(default_factory=bytearray)
    _fragments: int = 0
    _flags: int = 0
    _next_id: int = -1

    def __post_init__(self) -> None:
        self._next_id = self.first_chunk_id

    def add(self, packet: bytes) -> None:
        """Writes one packet, starting new chunks as needed."""
        rest = packet
        while True:
            room = self.payload_size - len(self._open) - 4
            if room < 1:
                self._close()
                continue
            if len(rest) <= room:
                self._open += fragment(rest)
                self._fragments += 1
                return
            self._open += fragment(rest[:room])
            self._fragments += 1
            rest = rest[room:]
            self._flags |= LAST
            self._close()
            self._flags |= FIRST

    def _close(self) -> None:
        payload = bytes(self._open) + bytes(self.payload_size - len(self._open))
        self.chunks.append(Chunk(self._next_id, self._fragments, self._flags, payload))
        self._next_id = (self._next_id + 1) & 0xFFFFFFFF
        self._open = bytearray()
        self._fragments = 0
        self._flags = 0

    def flush(self) -> list[Chunk]:
        """Closes the open chunk (if it holds anything) and returns every chunk so far."""
        if self._fragments:
            self._close()
        return self.chunks


def read_all(buffer: TraceBuffer) -> list[tuple[PacketSequenceProperties, bytes, int]]:
    """One full read pass: (sequence, packet bytes, previous_packet_dropped) per packet."""
    buffer.begin_read()
    out = []
    while (packet := buffer.read_next_trace_packet()) is not None:
        out.append((packet.sequence, bytes(packet.data), packet.previous_packet_dropped))
    return out


def copy(buffer: TraceBuffer, sequence: PacketSequenceProperties, chunk: Chunk, **kw: bool) -> None:
    """Copies `chunk` into `buffer` for `sequence`."""
    buffer.copy_chunk_untrusted(
        sequence, chunk.chunk_id, chunk.num_fragments, chunk.flags, chunk.payload, **kw
    )
