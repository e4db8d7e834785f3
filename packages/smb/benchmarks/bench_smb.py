"""Throughput of TraceWriter into shared memory vs appending the same bytes to a bytearray.

Run: `.venv/bin/python packages/smb/benchmarks/bench_smb.py`. Each case writes 100k
track-event-sized packets (20-60 bytes), median of 7 runs, all in this process, timed in
process CPU time and interleaved round by round (the machine is shared). Ratios are baseline
time / case time: 1.0 is as fast as the bytearray, 0.5 half as fast. The SMB is pre-faulted,
as in a long-running producer, and big enough that no chunk needs freeing during a run.

A second table times the arbiter's chunk round trip (get_new_chunk, return_completed_chunk),
then with a commit per chunk and with the service reading the chunk back, against adding one
ChunkToMove to a CommitDataRequest (the protobuf work every returned chunk costs), measured in
the same run and interleaved likewise.
"""

from __future__ import annotations

import collections
import mmap
import os
import random
import statistics
import time
from collections.abc import Callable

from perfetto_protos.common.commit_data_request_pb2 import CommitDataRequest
from perfetto_smb import (
    BufferExhaustedPolicy,
    PageLayout,
    SharedMemory,
    SharedMemoryABI,
    SharedMemoryArbiter,
    SharedMemoryReader,
    TraceWriter,
)
from perfetto_smb._patch_list import Patch
from protozero import _native

ITERATIONS = 100_000
RUNS = 7
SMB_SIZE = 8 * 1024 * 1024
CHUNKS_PER_RUN = 1000
clock = time.process_time


def make_packets() -> list[bytes]:
    """Encoded fields of track-event-sized packets (20-60 bytes)."""
    rng = random.Random(1)
    packets = []
    for _ in range(1024):
        size = rng.randint(20, 60)
        body = bytes([0x08]) + rng.randbytes(3) + bytes([0x12, size - 6]) + rng.randbytes(size - 6)
        packets.append(body)
    return packets


PACKETS = make_packets()
SEQUENCE = [PACKETS[i % len(PACKETS)] for i in range(ITERATIONS)]
TOTAL_BYTES = sum(len(p) for p in SEQUENCE)


def bytearray_baseline() -> float:
    buf = bytearray()
    start = clock()
    for packet in SEQUENCE:
        buf += packet
    return clock() - start


class FloorWriter:
    """The least any per-packet writer API does: one method call that stores a 1-byte size
    and the packet into shared memory, with no chunk, fragment or protobuf bookkeeping."""

    __slots__ = ("buffer", "pos")

    def __init__(self, buffer: mmap.mmap) -> None:
        self.buffer = buffer
        self.pos = 0

    def write(self, packet: bytes) -> None:
        """Appends `packet` with its size."""
        p = self.pos
        q = p + 1 + len(packet)
        self.buffer[p] = len(packet)
        self.buffer[p + 1 : q] = packet
        self.pos = q


def floor_case() -> float:
    """FloorWriter over the same pre-faulted shared memory: the per-packet Python floor."""
    with SharedMemory.create(SMB_SIZE) as shm:
        shm.buffer[:] = bytes(SMB_SIZE)
        write = FloorWriter(shm.buffer).write
        start = clock()
        for packet in SEQUENCE:
            write(packet)
        return clock() - start


def _discard(request: CommitDataRequest, done: Callable[[], None] | None) -> None:
    """The IPC stand-in: the request is built, not sent anywhere."""


def writer_case(page_size: int, write: Callable[[TraceWriter], None]) -> Callable[[], float]:
    """A run of `write` through a fresh writer over a pre-faulted SMB."""

    def run() -> float:
        with SharedMemory.create(SMB_SIZE) as shm:
            shm.buffer[:] = bytes(SMB_SIZE)
            arbiter = SharedMemoryArbiter(shm.buffer, page_size, _discard)
            writer = arbiter.create_trace_writer(1, BufferExhaustedPolicy.DROP)
            start = clock()
            write(writer)
            writer.flush()
            elapsed = clock() - start
            assert writer.drop_count == 0
            writer.close()
            arbiter.close()
        return elapsed

    return run


def messages(writer: TraceWriter) -> None:
    new_packet = writer.new_trace_packet
    for packet in SEQUENCE:
        new_packet().append_raw(packet)


def fields(writer: TraceWriter) -> None:
    new_packet = writer.new_trace_packet
    for i, packet in enumerate(SEQUENCE):
        msg = new_packet()
        msg.append_varint(8, 1_000_000 + i)
        msg.append_bytes(2, packet)


def single(writer: TraceWriter) -> None:
    write = writer.write_packet
    for packet in SEQUENCE:
        write(packet)


def batched(writer: TraceWriter) -> None:
    writer.write_packets(SEQUENCE)


def commit_entry() -> float:
    """CHUNKS_PER_RUN x one ChunkToMove added to a CommitDataRequest, fields set."""
    request = CommitDataRequest()
    start = clock()
    for chunk_id in range(CHUNKS_PER_RUN):
        move = request.chunks_to_move.add()
        move.page = chunk_id
        move.chunk = 0
        move.target_buffer = 1
    return clock() - start


def chunk_cycle(commit_each: bool, read_back: bool) -> Callable[[], float]:
    """CHUNKS_PER_RUN x (acquire a chunk, return it), committing each one if `commit_each`
    (else all after the clock stops); optionally the service frees each committed chunk."""

    def run() -> float:
        with SharedMemory.create(SMB_SIZE) as shm:
            shm.buffer[:] = bytes(SMB_SIZE)
            reader_region = SharedMemory.attach(os.dup(shm.fd), SMB_SIZE)
            reader = SharedMemoryReader(SharedMemoryABI(reader_region.buffer, 4096))
            moved: list[tuple[int, int]] = []

            def commit(request: CommitDataRequest, done: Callable[[], None] | None) -> None:
                for move in request.chunks_to_move:
                    moved.append((move.page, move.chunk))
                    if read_back:
                        reader.read_chunk(move.page, move.chunk)

            arbiter = SharedMemoryArbiter(shm.buffer, 4096, commit)
            get_new_chunk = arbiter.get_new_chunk
            return_completed_chunk = arbiter.return_completed_chunk
            flush = arbiter.flush_pending_commit_data_requests
            drop = BufferExhaustedPolicy.DROP
            no_patches: collections.deque[Patch] = collections.deque()
            start = clock()
            for chunk_id in range(CHUNKS_PER_RUN):
                chunk = get_new_chunk(1, chunk_id, 0, 0, drop)
                assert chunk is not None
                return_completed_chunk(chunk, 1, no_patches)
                if commit_each:
                    flush()
            elapsed = clock() - start
            flush()
            assert len(moved) == CHUNKS_PER_RUN
            arbiter.close()
            reader.abi.close()
            reader_region.close()
        return elapsed

    return run


def read_cycle() -> float:
    """CHUNKS_PER_RUN x the service's read_chunk of a complete 4 KiB chunk (copy out, free)."""
    with SharedMemory.create(CHUNKS_PER_RUN * 4096) as shm:
        shm.buffer[:] = bytes(CHUNKS_PER_RUN * 4096)
        abi = SharedMemoryABI(shm.buffer, 4096)
        reader = SharedMemoryReader(abi)
        for page in range(CHUNKS_PER_RUN):
            chunk = abi.try_acquire_chunk_in_free_page(
                page, PageLayout.DIV1, chunk_id=page, writer_id=1, packet_count=1
            )
            assert chunk is not None
            abi.release_chunk_as_complete(chunk)
        read_chunk = reader.read_chunk
        start = clock()
        for page in range(CHUNKS_PER_RUN):
            read_chunk(page, 0)
        elapsed = clock() - start
        assert reader.chunks_read == CHUNKS_PER_RUN
        abi.close()
    return elapsed


def main() -> None:
    cases: list[tuple[str, Callable[[], float]]] = [
        ("bytearray += packet (baseline)", bytearray_baseline),
        ("floor: one call + one store per packet, SMB", floor_case),
        ("4K pages: new_trace_packet().append_raw(p)", writer_case(4096, messages)),
        ("4K pages: new_trace_packet() + 2 fields", writer_case(4096, fields)),
        ("4K pages: write_packet(p)", writer_case(4096, single)),
        ("4K pages: write_packets(all)", writer_case(4096, batched)),
        ("32K pages: write_packet(p)", writer_case(32768, single)),
        ("32K pages: write_packets(all)", writer_case(32768, batched)),
    ]
    # Interleaved: every case once per round, so that load from other processes on the
    # machine hits all cases alike.
    samples: list[list[float]] = [[] for _ in cases]
    for _ in range(RUNS):
        for i, (_, run) in enumerate(cases):
            samples[i].append(run())
    results = [(name, statistics.median(s)) for (name, _), s in zip(cases, samples, strict=True)]
    base = results[0][1]
    mean = TOTAL_BYTES / ITERATIONS
    print(f"compiled modules: {_native.compiled_modules('perfetto_smb')}")
    print(f"{ITERATIONS} packets of 20-60 bytes (mean {mean:.1f} B), median of {RUNS} runs")
    print(f"{'case':<46}{'ns/packet':>10}{'Mpkt/s':>9}{'MB/s':>8}{'ratio':>8}")
    for name, seconds in results:
        ns = seconds / ITERATIONS * 1e9
        rate = ITERATIONS / seconds / 1e6
        mbps = TOTAL_BYTES / seconds / 1e6
        print(f"{name:<46}{ns:>10.0f}{rate:>9.2f}{mbps:>8.1f}{base / seconds:>8.2f}")
    chunk_cases: list[tuple[str, Callable[[], float]]] = [
        ("add a ChunkToMove to a request (reference)", commit_entry),
        ("get_new_chunk + return_completed_chunk", chunk_cycle(False, False)),
        ("  ... + commit each chunk", chunk_cycle(True, False)),
        ("  ... + service read, copy and free", chunk_cycle(True, True)),
    ]
    chunk_samples: list[list[float]] = [[] for _ in chunk_cases]
    for _ in range(RUNS):
        for i, (_, run) in enumerate(chunk_cases):
            chunk_samples[i].append(run())
    chunk_results = [
        (name, statistics.median(s))
        for (name, _), s in zip(chunk_cases, chunk_samples, strict=True)
    ]
    chunk_base = chunk_results[0][1]
    print(f"{CHUNKS_PER_RUN} chunks of 4 KiB pages, median of {RUNS} runs")
    print(f"{'chunk case':<46}{'us/chunk':>10}{'ratio':>8}")
    for name, seconds in chunk_results:
        print(f"{name:<46}{seconds / CHUNKS_PER_RUN * 1e6:>10.2f}{chunk_base / seconds:>8.2f}")
    read = statistics.median(read_cycle() for _ in range(RUNS))
    print(f"service read_chunk of a complete 4 KiB chunk: {read / CHUNKS_PER_RUN * 1e6:.2f} us")


if __name__ == "__main__":
    main()
