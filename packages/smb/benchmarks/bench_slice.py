"""TrackEvent slices through TraceWriter, and one CAS on an SMB page header word.

A slice is two packets (begin, end) of the size a TrackEvent writer makes with an interned
name and a timestamp delta on the incremental clock; each is one `TraceWriter.write_packet`
call into a pre-faulted SMB. Rows: the packets' bytes prebuilt (the TraceWriter's own cost),
and assembled per event from the timestamp delta (what a TrackEvent writer does per event).
References measured in the same run: a plain Python call of an empty function, and what
viztracer adds per traced call of it. Process CPU time, median of the runs, interleaved.

The run measures the build that loads, then runs itself with PERFETTO_PY_PURE=1 and prints
both (`--this-build-only` skips the second).

    python benchmarks/bench_slice.py [--iterations N] [--runs R]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

from perfetto_protos.common.commit_data_request_pb2 import CommitDataRequest
from perfetto_smb import BufferExhaustedPolicy, SharedMemory, SharedMemoryArbiter, TraceWriter
from perfetto_smb._atomics import AtomicWords
from protozero import _native
from protozero._proto_utils import SHORT_VARINTS

SMB_SIZE = 16 * 1024 * 1024
_TS = b"\x40"  # TracePacket.timestamp
_BEGIN_TAIL = bytes.fromhex("5a 06 4801 5005 1801 6802")  # track_event{type, name_iid, cat}
_END_TAIL = bytes.fromhex("5a 02 4802 6802")  # track_event{type=SLICE_END}, sequence_flags


def _discard(request: CommitDataRequest, done: Callable[[], None] | None) -> None:
    """The IPC stand-in: the request is built, not sent anywhere."""


def _with_writer(body: Callable[[TraceWriter, int], None], iterations: int) -> float:
    with SharedMemory.create(SMB_SIZE) as shm:
        shm.buffer[:] = bytes(SMB_SIZE)
        arbiter = SharedMemoryArbiter(shm.buffer, 4096, _discard)
        writer = arbiter.create_trace_writer(1, BufferExhaustedPolicy.DROP)
        start = time.process_time_ns()
        body(writer, iterations)
        elapsed = time.process_time_ns() - start
        assert writer.drop_count == 0
        writer.close()
        arbiter.close()
    return elapsed / iterations


def _prebuilt(writer: TraceWriter, iterations: int) -> None:
    write = writer.write_packet
    begin = _TS + SHORT_VARINTS[100] + _BEGIN_TAIL
    end = _TS + SHORT_VARINTS[100] + _END_TAIL
    for _ in range(iterations):
        write(begin)
        write(end)


def _assembled(writer: TraceWriter, iterations: int) -> None:
    write = writer.write_packet
    varints = SHORT_VARINTS
    last = 0
    ts = 0
    for _ in range(iterations):
        ts += 150
        write(_TS + varints[ts - last] + _BEGIN_TAIL)
        last = ts
        ts += 150
        write(_TS + varints[ts - last] + _END_TAIL)
        last = ts


def _empty() -> None:
    pass


def _plain_calls(iterations: int) -> float:
    f = _empty
    start = time.process_time_ns()
    for _ in range(iterations):
        f()
    return (time.process_time_ns() - start) / iterations


def _viztracer_calls(iterations: int) -> float:
    from viztracer import VizTracer  # type: ignore[import-untyped]

    tracer = VizTracer(verbose=0, tracer_entries=iterations + 1000)
    f = _empty
    tracer.start()
    start = time.process_time_ns()
    for _ in range(iterations):
        f()
    elapsed = time.process_time_ns() - start
    tracer.stop()
    tracer.clear()
    return elapsed / iterations


def _empty_loop(iterations: int) -> float:
    start = time.process_time_ns()
    for _ in range(iterations):
        pass
    return (time.process_time_ns() - start) / iterations


def _cas(iterations: int) -> float:
    with SharedMemory.create(4096) as shm:
        atomics = AtomicWords(shm.buffer)
        cas = atomics.compare_exchange
        start = time.process_time_ns()
        for _ in range(iterations):
            cas(0, 0, 0)
        elapsed = time.process_time_ns() - start
        atomics.close()
    return elapsed / iterations


def main() -> int:
    """Prints ns per slice and per CAS for this build (and the pure one, run as a child)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--iterations", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--this-build-only", action="store_true")
    args = parser.parse_args()
    compiled = all(_native.compiled_modules("perfetto_smb").values())
    if compiled and not args.this_build_only:
        pure = {**os.environ, "PERFETTO_PY_PURE": "1"}
        subprocess.run([sys.executable, *sys.argv, "--this-build-only"], env=pure, check=True)
    n = args.iterations
    cases: list[tuple[str, Callable[[], float]]] = [
        ("plain Python call of an empty function", lambda: _plain_calls(n)),
        ("viztracer: traced call of it", lambda: _viztracer_calls(n)),
        ("slice begin+end, prebuilt packets", lambda: _with_writer(_prebuilt, n)),
        ("slice begin+end, assembled per event", lambda: _with_writer(_assembled, n)),
        ("empty loop iteration", lambda: _empty_loop(n)),
        ("one CAS on a page header word (+ loop)", lambda: _cas(n)),
    ]
    samples: list[list[float]] = [[] for _ in cases]
    for _ in range(args.runs):
        for i, (_, run) in enumerate(cases):
            samples[i].append(run())
    medians = [statistics.median(s) for s in samples]
    plain, viz = medians[0], medians[1]
    build = "compiled (Cython)" if compiled else "pure Python"
    print(f"smb slice benchmark: {build}, {n} iterations, median of {args.runs}")
    for (name, _), value in zip(cases, medians, strict=True):
        print(f"  {name:<42}{value:8.0f} ns")
    print(f"  viztracer adds {viz - plain:.0f} ns per traced call; a slice costs")
    print(
        f"  {medians[2] / max(viz - plain, 1):.2f}x / {medians[3] / max(viz - plain, 1):.2f}x that"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
