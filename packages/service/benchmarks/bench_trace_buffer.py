"""TraceBuffer throughput: ingest of 4 KiB chunks and read-back into trace-file bytes.

Reference, measured in the same run: a bare Python loop copying the same chunk payloads
into a bytearray ring (what the service cannot do less than). Reported per CPU-second
(process time), median of 7 runs; ratios are our CPU per MB over the reference's. The
read-back runs validate every packet and append its trusted suffix, then frame it as a
trace file (1 MiB per read, like write_into_file) or as ReadBuffers replies (32 KiB per
read, like the IPC path), from the packets read or written straight from the buffer as
traced does. A last workload reads a full `--ring-mib` ring (64 MiB) of
track-event packets back to a file and checks the goals of issue #9 (compiled build): ingest
at least 1000 MB and that read-back at least 150 MB per CPU-second.

The run measures the build that loads, then runs itself again with PERFETTO_PY_PURE=1
(`--this-build-only` skips the second).

    python packages/service/benchmarks/bench_trace_buffer.py [--mib N] [--ring-mib N] [--runs N]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

from perfetto_service.core._buffer_reader import (
    read_producer_packets,
    read_producer_packets_as_replies,
    read_producer_packets_as_trace,
)
from perfetto_service.core._read_slicer import ReplyWriter, read_buffers_replies
from perfetto_service.core._trace_buffer import (
    OverwritePolicy,
    PacketSequenceProperties,
    TraceBuffer,
)
from perfetto_service.core._trusted_fields import TrustedFieldsWriter
from protozero import _native, encode_varint, write_redundant_varint

CHUNK_PAYLOAD = 4088 - 8  # a Div1 chunk of a 4 KiB page, minus its header
RUNS = 7
WRITERS = 8
UNIQUE_BYTES = 8 << 20
"""Chunk payloads beyond this many bytes repeat earlier ones (with their own chunk ids)."""
INGEST_GOAL = 1000.0
READ_BACK_GOAL = 150.0


def _track_event_packet(rng: random.Random, timestamp: int) -> bytes:
    """A 20-60 byte TracePacket shaped like an SDK track event."""
    name_iid = rng.randrange(1, 300)
    event = b"\x48" + encode_varint(rng.choice((1, 2, 3))) + b"\x50" + encode_varint(name_iid)
    event += b"\x58" + encode_varint(rng.randrange(1 << 20, 1 << 40))
    extra = rng.randrange(0, 34)
    if extra:
        event += (
            b"\xba\x01" + encode_varint(extra) + bytes(rng.randrange(256) for _ in range(extra))
        )
    return (
        b"\x40"
        + encode_varint(timestamp)
        + b"\x5a"
        + encode_varint(len(event))
        + event
        + b"\x68\x02"
    )


def _bundle_packet(rng: random.Random, timestamp: int) -> bytes:
    """A 300-1500 byte TracePacket, like an ftrace event bundle."""
    body = bytes(rng.randrange(256) for _ in range(rng.randrange(300, 1500)))
    return b"\x40" + encode_varint(timestamp) + b"\x0a" + encode_varint(len(body)) + body


Chunk = tuple[PacketSequenceProperties, int, int, bytes]


def _make_chunks(
    total_bytes: int, make_packet: Callable[[random.Random, int], bytes]
) -> list[Chunk]:
    """Chunks of whole packets (no fragmentation), round-robin over the writers."""
    rng = random.Random(1)
    chunks: list[Chunk] = []
    next_ids = [0] * WRITERS
    timestamp = 10**12
    produced = 0
    while produced < total_bytes:
        writer = len(chunks) % WRITERS
        props = PacketSequenceProperties(1 + writer // 2, 1000, 4000 + writer, 1 + writer % 2)
        if produced >= UNIQUE_BYTES:
            _, _, count, payload = chunks[len(chunks) % (UNIQUE_BYTES // CHUNK_PAYLOAD)]
            chunks.append((props, next_ids[writer], count, payload))
            next_ids[writer] += 1
            produced += CHUNK_PAYLOAD
            continue
        buf = bytearray()
        count = 0
        while True:
            timestamp += rng.randrange(100, 5000)
            packet = make_packet(rng, timestamp)
            if len(buf) + 4 + len(packet) > CHUNK_PAYLOAD:
                break
            header = bytearray(4)
            write_redundant_varint(header, 0, len(packet))
            buf += header + packet
            count += 1
        buf += bytes(CHUNK_PAYLOAD - len(buf))
        chunks.append((props, next_ids[writer], count, bytes(buf)))
        next_ids[writer] += 1
        produced += CHUNK_PAYLOAD
    return chunks


def _cpu_seconds(action: Callable[[], object]) -> float:
    start = time.process_time()
    action()
    return time.process_time() - start


def _to_file(buffer: TraceBuffer) -> int:
    """Drains `buffer` like write_into_file (1 MiB per read); returns the bytes produced."""
    trusted = TrustedFieldsWriter()
    written = 0
    while True:
        result = read_producer_packets_as_trace(buffer, trusted, threshold=1 << 20)
        written += len(result.trace)
        if not result.hit_threshold:
            return written


def _to_replies(buffer: TraceBuffer) -> int:
    """Drains `buffer` like ReadBuffers over IPC (32 KiB per read); returns the reply bytes."""
    trusted = TrustedFieldsWriter()
    sent = 0
    while True:
        result = read_producer_packets(buffer, trusted, threshold=32768)
        sent += sum(len(reply) for reply in read_buffers_replies(result.packets))
        if not result.hit_threshold:
            return sent


def _to_replies_directly(buffer: TraceBuffer) -> int:
    """`_to_replies` with the replies written straight from the buffer (traced's path)."""
    trusted = TrustedFieldsWriter()
    sent = 0
    while True:
        writer = ReplyWriter()
        result = read_producer_packets_as_replies(buffer, trusted, 32768, writer)
        sent += sum(len(reply) for reply in writer.replies())
        if not result.hit_threshold:
            return sent


def _reference_seconds(buffer_size: int, chunks: list[Chunk]) -> float:
    """CPU seconds of a bare loop copying the chunk payloads into a bytearray ring."""
    ring = bytearray(buffer_size)
    start = time.process_time()
    pos = 0
    for _, _, _, payload in chunks:
        if pos + len(payload) > buffer_size:
            pos = 0
        ring[pos : pos + len(payload)] = payload
        pos += len(payload)
    return time.process_time() - start


def _workload(name: str, buffer_size: int, chunks: list[Chunk], runs: int) -> None:
    ingest_bytes = len(chunks) * CHUNK_PAYLOAD

    def filled() -> TraceBuffer:
        buffer = TraceBuffer(buffer_size, OverwritePolicy.OVERWRITE)
        copy = buffer.copy_chunk_untrusted
        for props, chunk_id, count, payload in chunks:
            copy(props, chunk_id, count, 0, payload)
        return buffer

    times: dict[str, list[float]] = {"ref": [], "ingest": [], "file": [], "ipc": [], "direct": []}
    out_bytes = {"file": 0, "ipc": 0, "direct": 0}
    packets_read = 0
    for _ in range(runs):
        times["ref"].append(_reference_seconds(buffer_size, chunks))
        times["ingest"].append(_cpu_seconds(filled))
        for form, drain in (
            ("file", _to_file),
            ("ipc", _to_replies),
            ("direct", _to_replies_directly),
        ):
            buffer = filled()
            start = time.process_time()
            out_bytes[form] = drain(buffer)
            times[form].append(time.process_time() - start)
            packets_read = buffer.stats.chunks_read
    seconds_of = {form: statistics.median(form_times) for form, form_times in times.items()}
    ref, ingest_s = seconds_of["ref"], seconds_of["ingest"]
    packets = sum(count for _, _, count, _ in chunks)
    mib = 1 << 20
    print(
        f"{name}: {buffer_size // mib} MiB ring, {len(chunks)} chunks of {CHUNK_PAYLOAD} B "
        f"({ingest_bytes / mib:.1f} MiB, {packets} packets, ~{ingest_bytes // packets} B each), "
        f"{WRITERS} writers; {packets_read} chunks read back (the rest was overwritten)"
    )
    print(f"  reference bytearray copy   : {ingest_bytes / ref / mib:8.1f} MB per CPU-s")
    print(
        f"  ingest (copy_chunk)        : {ingest_bytes / ingest_s / mib:8.1f} MB per CPU-s, "
        f"{len(chunks) / ingest_s:8.0f} chunks/s, {packets / ingest_s:9.0f} packets/s, "
        f"ratio {ingest_s / ref:5.2f}x the reference's CPU per MB"
    )
    for form, label in (
        ("file", "read back -> trace file   "),
        ("ipc", "read back -> IPC replies  "),
        ("direct", "read back -> IPC, direct  "),
    ):
        seconds = seconds_of[form]
        per_mb = seconds / out_bytes[form]
        print(
            f"  {label}: {out_bytes[form] / seconds / mib:8.1f} MB per CPU-s "
            f"({out_bytes[form] / mib:.1f} MiB out), "
            f"ratio {per_mb / (ref / ingest_bytes):6.1f}x the reference's CPU per MB"
        )


def _full_ring(ring_mib: int, runs: int, compiled: bool) -> None:
    """A full ring of track-event packets read back to a file, with the goals checked."""
    buffer_size = ring_mib << 20
    chunks = _make_chunks(buffer_size * 3 // 2, _track_event_packet)
    ingest_bytes = len(chunks) * CHUNK_PAYLOAD
    refs: list[float] = []
    ingests: list[float] = []
    reads: list[float] = []
    out = 0
    for _ in range(runs):
        refs.append(_reference_seconds(buffer_size, chunks))
        buffer = TraceBuffer(buffer_size, OverwritePolicy.OVERWRITE)
        copy = buffer.copy_chunk_untrusted
        start = time.process_time()
        for props, chunk_id, count, payload in chunks:
            copy(props, chunk_id, count, 0, payload)
        ingests.append(time.process_time() - start)
        start = time.process_time()
        out = _to_file(buffer)
        reads.append(time.process_time() - start)
    mib = 1 << 20
    ref = ingest_bytes / statistics.median(refs) / mib
    ingest = ingest_bytes / statistics.median(ingests) / mib
    read = out / statistics.median(reads) / mib
    print(
        f"full {ring_mib} MiB ring of track-event packets, wrapped once and a half, "
        f"read back to a file ({out / mib:.1f} MiB out)"
    )
    print(f"  reference bytearray copy   : {ref:8.1f} MB per CPU-s")
    print(f"  ingest (copy_chunk)        : {ingest:8.1f} MB per CPU-s")
    print(f"  read back -> trace file   : {read:8.1f} MB per CPU-s")
    if compiled:
        for label, value, goal in (
            ("ingest", ingest, INGEST_GOAL),
            ("read back -> trace file", read, READ_BACK_GOAL),
        ):
            verdict = "met" if value >= goal else "NOT met"
            print(f"  goal {label} >= {goal:.0f} MB per CPU-s: {verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mib", type=int, default=8, help="buffer size in MiB")
    parser.add_argument("--ring-mib", type=int, default=64, help="the full ring's size in MiB")
    parser.add_argument("--runs", type=int, default=RUNS, help="runs to take the median of")
    parser.add_argument("--this-build-only", action="store_true")
    args = parser.parse_args()
    compiled = all(_native.compiled_modules("perfetto_service").values())
    if compiled and not args.this_build_only:
        pure = {**os.environ, _native.PURE_ENV: "1"}
        subprocess.run([sys.executable, *sys.argv, "--this-build-only"], env=pure, check=True)
    buffer_size = args.mib << 20
    build = "compiled (Cython)" if compiled else "pure Python"
    print(
        f"TraceBuffer benchmark, {build}, median of {args.runs} runs, CPU time (time.process_time)"
    )
    for name, make_packet in (
        ("track-event-sized packets (20-60 B)", _track_event_packet),
        ("bundle-sized packets (300-1500 B)", _bundle_packet),
    ):
        # Enough chunks to wrap the ring once and a half.
        chunks = _make_chunks(buffer_size * 3 // 2, make_packet)
        _workload(name, buffer_size, chunks, args.runs)
    _full_ring(args.ring_mib, args.runs, compiled)


if __name__ == "__main__":
    main()
