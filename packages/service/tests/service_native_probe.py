"""Feeds a TraceBuffer random chunk streams from a seed and prints what it reads back.

Run under each build (compiled, PERFETTO_PY_PURE=1) to compare: for every stream it prints
the trace-file bytes read back, the packets read as slices and as ReadBuffers replies, and the
buffer's counters.

    python service_native_probe.py SEED STREAMS [churn]
"""

from __future__ import annotations

import random
import sys

from perfetto_service.core._buffer_reader import (
    read_producer_packets,
    read_producer_packets_as_replies,
    read_producer_packets_as_trace,
)
from perfetto_service.core._read_slicer import ReplyWriter, read_buffers_replies
from perfetto_service.core._trace_buffer import OverwritePolicy, Patch, TraceBuffer
from perfetto_service.core._trusted_fields import TrustedFieldsWriter
from service_testlib import FIRST, LAST, PATCH, ChunkPacker, redundant4, seq


def _packet(rng: random.Random) -> bytes:
    """A packet: mostly well-formed protobuf, sometimes reserved fields or random bytes."""
    kind = rng.randrange(10)
    if kind == 0:
        return rng.randbytes(rng.randrange(0, 40))
    if kind == 1:
        return b"\x50\x07" + rng.randbytes(rng.randrange(0, 8))  # field 10: reserved
    out = bytearray()
    for _ in range(rng.randrange(0, 8)):
        field = rng.choice((1, 8, 11, 15, 16, 23, 2047, 536870911))
        wire = rng.choice((0, 0, 1, 2, 2, 5))
        out += _varint((field << 3) | wire)
        if wire == 0:
            out += _varint(rng.choice((0, 1, 300, rng.getrandbits(64))))
        elif wire == 1:
            out += rng.randbytes(8)
        elif wire == 5:
            out += rng.randbytes(4)
        else:
            body = rng.randbytes(rng.choice((0, 5, 127, 128, 300)))
            out += _varint(len(body)) + body
    return bytes(out)


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _hostile_payload(rng: random.Random, size: int) -> bytes:
    """Fragments whose sizes lie: overrunning, truncated varints, the drop-packet marker."""
    out = bytearray()
    while len(out) < size:
        choice = rng.randrange(5)
        if choice == 0:
            out += redundant4(rng.randrange(0, 1 << 28))
        elif choice == 1:
            out += b"\xff\xff\xff\xff"
        elif choice == 2:
            out += redundant4(rng.randrange(0, 12)) + rng.randbytes(rng.randrange(0, 12))
        elif choice == 3:
            out += bytes((rng.randrange(0x80),))
        else:
            out += rng.randbytes(rng.randrange(1, 6))
    return bytes(out[:size])


def run_stream(rng: random.Random) -> list[str]:
    """One random stream into a fresh buffer; the lines describing what was read."""
    size = rng.choice((1024, 4096, 16384))
    policy = rng.choice(list(OverwritePolicy))
    buffer = TraceBuffer(size, policy)
    chunk_size = rng.choice((24, 64, 200, 1000))
    packers = {
        w: ChunkPacker(chunk_size, first_chunk_id=rng.choice((0, 0xFFFFFFFE))) for w in (1, 2, 3)
    }
    lines: list[str] = []
    trusted = TrustedFieldsWriter()
    for _ in range(rng.randrange(1, 6)):
        for _ in range(rng.randrange(0, 40)):
            writer = rng.choice((1, 2, 3))
            packers[writer].add(_packet(rng))
        for writer, packer in packers.items():
            chunks, packer.chunks = packer.chunks, []
            for chunk in chunks:
                flags, payload, fragments = chunk.flags, chunk.payload, chunk.num_fragments
                roll = rng.randrange(20)
                if roll == 0:
                    payload = _hostile_payload(rng, len(payload))
                    fragments = rng.randrange(0, 8)
                elif roll == 1:
                    flags |= rng.choice((FIRST, LAST, PATCH))
                buffer.copy_chunk_untrusted(
                    seq(writer=writer, pid=rng.choice((None, 4242))),
                    chunk.chunk_id,
                    fragments,
                    flags,
                    payload,
                    chunk_complete=rng.randrange(30) != 0,
                )
                if roll == 2:
                    buffer.try_patch_chunk_contents(
                        1,
                        writer,
                        chunk.chunk_id,
                        [Patch(rng.randrange(-2, len(payload)), rng.randbytes(4))],
                        rng.randrange(2) == 0,
                    )
        if rng.randrange(2):
            result = read_producer_packets_as_trace(
                buffer, trusted, rng.choice((1, 300, 1 << 20, 1 << 20))
            )
            lines.append(f"trace {result.trace.hex()} {result[1:]}")
        elif rng.randrange(2):
            drained = read_producer_packets(buffer, trusted, rng.choice((1, 300, 1 << 20, 1 << 20)))
            packets = [b"".join(p).hex() for p in drained.packets]
            replies = [r.hex() for r in read_buffers_replies(drained.packets)]
            lines.append(f"slices {packets} {replies} {drained[1:]}")
        else:
            reply_writer = ReplyWriter()
            direct = read_producer_packets_as_replies(
                buffer, trusted, rng.choice((1, 300, 1 << 20, 1 << 20)), reply_writer
            )
            lines.append(f"replies {[r.hex() for r in reply_writer.replies()]} {direct}")
    result = read_producer_packets_as_trace(buffer, trusted, 1 << 30)
    lines.append(f"trace {result.trace.hex()} {result[1:]}")
    lines.append(f"stats {buffer.stats.as_dict()}")
    return lines


def run_churn(rng: random.Random) -> list[str]:
    """Many writers of small chunks through a ring that wraps many times, read in between.

    The chunk index grows, collides, forgets overwritten chunks and rehashes.
    """
    policy = rng.choice(list(OverwritePolicy))
    buffer = TraceBuffer(rng.choice((8192, 65536)), policy)
    count = rng.randrange(20, 80)
    writers = [(rng.choice((1, 2, 0xFFFF)), rng.randrange(1, 0x10000)) for _ in range(count)]
    packers = {
        key: ChunkPacker(rng.choice((24, 40, 100)), first_chunk_id=rng.choice((0, 0xFFFFFFF0)))
        for key in writers
    }
    lines: list[str] = []
    trusted = TrustedFieldsWriter()
    for _ in range(rng.randrange(20, 60)):
        for _ in range(rng.randrange(0, 200)):
            packers[rng.choice(writers)].add(_packet(rng))
        for (producer, writer), packer in packers.items():
            chunks, packer.chunks = packer.chunks, []
            for chunk in chunks:
                buffer.copy_chunk_untrusted(
                    seq(producer=producer, writer=writer),
                    chunk.chunk_id,
                    chunk.num_fragments,
                    chunk.flags | (PATCH if rng.randrange(50) == 0 else 0),
                    chunk.payload,
                    chunk_complete=rng.randrange(40) != 0,
                )
                if rng.randrange(30) == 0:
                    buffer.try_patch_chunk_contents(
                        producer, writer, chunk.chunk_id, [Patch(0, rng.randbytes(4))], False
                    )
        if rng.randrange(3) == 0:
            result = read_producer_packets_as_trace(buffer, trusted, rng.choice((300, 1 << 20)))
            lines.append(f"trace {result.trace.hex()} {result[1:]}")
    result = read_producer_packets_as_trace(buffer, trusted, 1 << 30)
    lines.append(f"trace {result.trace.hex()} {result[1:]}")
    lines.append(f"stats {buffer.stats.as_dict()}")
    histograms = sorted((key, h.counts, h.sums) for key, h in buffer.writer_stats.items())
    lines.append(f"writers {histograms}")
    return lines


def main() -> None:
    seed, streams = int(sys.argv[1]), int(sys.argv[2])
    stream = run_churn if sys.argv[3:] == ["churn"] else run_stream
    rng = random.Random(seed)
    for _ in range(streams):
        for line in stream(rng):
            print(line)


if __name__ == "__main__":
    main()
