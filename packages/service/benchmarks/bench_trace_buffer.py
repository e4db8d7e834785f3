"""TraceBuffer throughput: ingest of 4 KiB chunks and read-back into trace-file bytes.

Reference, measured in the same run: a bare Python loop copying the same chunk payloads
into a bytearray ring (what the service cannot do less than). Reported per CPU-second
(process time), median of 7 runs; ratios are our CPU per MB over the reference's.

    python packages/service/benchmarks/bench_trace_buffer.py [--mib N]
"""

from __future__ import annotations

import argparse
import random
import statistics
import struct
import time
from collections.abc import Callable

from perfetto_service import (
    OverwritePolicy,
    PacketSequenceProperties,
    TraceBuffer,
    TrustedFieldsWriter,
    read_producer_packets,
    trace_file_bytes,
)

CHUNK_PAYLOAD = 4088 - 8  # a Div1 chunk of a 4 KiB page, minus its header
RUNS = 7
WRITERS = 8


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _track_event_packet(rng: random.Random, timestamp: int) -> bytes:
    """A 20-60 byte TracePacket shaped like an SDK track event."""
    name_iid = rng.randrange(1, 300)
    event = b"\x48" + _varint(rng.choice((1, 2, 3))) + b"\x50" + _varint(name_iid)
    event += b"\x58" + _varint(rng.randrange(1 << 20, 1 << 40))
    extra = rng.randrange(0, 34)
    if extra:
        event += b"\xba\x01" + _varint(extra) + bytes(rng.randrange(256) for _ in range(extra))
    return b"\x40" + _varint(timestamp) + b"\x5a" + _varint(len(event)) + event + b"\x68\x02"


def _make_chunks(total_bytes: int) -> list[tuple[PacketSequenceProperties, int, int, bytes]]:
    """Chunks of whole packets (no fragmentation), round-robin over the writers."""
    rng = random.Random(1)
    chunks: list[tuple[PacketSequenceProperties, int, int, bytes]] = []
    next_ids = [0] * WRITERS
    timestamp = 10**12
    produced = 0
    while produced < total_bytes:
        writer = len(chunks) % WRITERS
        payload = bytearray()
        count = 0
        while True:
            timestamp += rng.randrange(100, 5000)
            packet = _track_event_packet(rng, timestamp)
            if len(payload) + 4 + len(packet) > CHUNK_PAYLOAD:
                break
            size = len(packet)
            payload += struct.pack(
                "4B",
                (size & 0x7F) | 0x80,
                ((size >> 7) & 0x7F) | 0x80,
                ((size >> 14) & 0x7F) | 0x80,
                size >> 21,
            )
            payload += packet
            count += 1
        payload += bytes(CHUNK_PAYLOAD - len(payload))
        props = PacketSequenceProperties(1 + writer // 2, 1000, 4000 + writer, 1 + writer % 2)
        chunks.append((props, next_ids[writer], count, bytes(payload)))
        next_ids[writer] += 1
        produced += CHUNK_PAYLOAD
    return chunks


def _cpu_seconds(action: Callable[[], None]) -> float:
    start = time.process_time()
    action()
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mib", type=int, default=8, help="buffer size in MiB")
    args = parser.parse_args()
    buffer_size = args.mib << 20
    chunks = _make_chunks(buffer_size * 3 // 2)  # enough to wrap the ring once
    ingest_bytes = len(chunks) * CHUNK_PAYLOAD
    packets = sum(count for _, _, count, _ in chunks)

    def reference() -> None:
        ring = bytearray(buffer_size)
        pos = 0
        for _, _, _, payload in chunks:
            if pos + len(payload) > buffer_size:
                pos = 0
            ring[pos : pos + len(payload)] = payload
            pos += len(payload)

    ref_times, ingest_times, read_times = [], [], []
    read_bytes = read_packets = 0
    for _ in range(RUNS):
        ref_times.append(_cpu_seconds(reference))
        buffer = TraceBuffer(buffer_size, OverwritePolicy.OVERWRITE)

        def ingest(buffer: TraceBuffer = buffer) -> None:
            copy = buffer.copy_chunk_untrusted
            for props, chunk_id, count, payload in chunks:
                copy(props, chunk_id, count, 0, payload)

        ingest_times.append(_cpu_seconds(ingest))
        out: list[bytes] = []

        def read_back(buffer: TraceBuffer = buffer, out: list[bytes] = out) -> None:
            trusted = TrustedFieldsWriter()
            while True:
                result = read_producer_packets(buffer, trusted, threshold=1 << 20)
                out.append(trace_file_bytes(result.packets))
                if not result.hit_threshold:
                    return

        read_times.append(_cpu_seconds(read_back))
        read_bytes = sum(len(part) for part in out)
        read_packets = buffer.stats.chunks_read

    ref = statistics.median(ref_times)
    ingest_s = statistics.median(ingest_times)
    read_s = statistics.median(read_times)
    mib = 1 << 20
    print(
        f"TraceBuffer {args.mib} MiB ring, {len(chunks)} chunks of {CHUNK_PAYLOAD} B, "
        f"{packets} packets of 20-60 B, {WRITERS} writers; median of {RUNS} (CPU time)"
    )
    print(f"  reference bytearray copy : {ingest_bytes / ref / mib:10.1f} MB/s")
    print(
        f"  ingest (copy_chunk)      : {ingest_bytes / ingest_s / mib:10.1f} MB/s per CPU-s, "
        f"{len(chunks) / ingest_s:10.0f} chunks/s, ratio {ingest_s / ref:6.2f}x reference CPU/MB"
    )
    print(
        f"  read back to file bytes  : {read_bytes / read_s / mib:10.1f} MB/s per CPU-s "
        f"({read_bytes / mib:.1f} MiB, {read_packets} chunks read), "
        f"ratio {read_s / ref * ingest_bytes / read_bytes:6.2f}x reference CPU/MB"
    )
    total = ingest_s + read_s
    print(f"  ingest + read, per MB ingested: {ingest_bytes / total / mib:10.1f} MB per CPU-s")


if __name__ == "__main__":
    main()
