"""`perfetto --summary` throughput on an SDK-shaped trace, against a full upb parse of it.

Prints MB/s, the projected seconds per GB, peak RSS growth, and the ratio of CPU time
against `Trace.ParseFromString` (protobuf's C parser, which holds the whole trace in memory)
measured in the same run. Usage: bench_summary.py [MiB] (default 64).
"""

from __future__ import annotations

import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))

from perfetto_cmd._summary import summarize
from perfetto_protos.trace.trace_pb2 import Trace
from tracegen import sdk_like_packets

ROUNDS_PER_BLOCK = 2000


def _trace(mib: int) -> bytes:
    packets = list(sdk_like_packets(ROUNDS_PER_BLOCK))
    header, block = b"".join(packets[:5]), b"".join(packets[5:])
    return header + block * max(1, (mib << 20) // len(block))


def _cpu(fn: object, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.process_time()
        fn()  # type: ignore[operator]
        times.append(time.process_time() - start)
    return statistics.median(times)


def main() -> None:
    mib = int(sys.argv[1]) if len(sys.argv) > 1 else 64
    data = _trace(mib)
    size_mb = len(data) / 1e6
    with tempfile.NamedTemporaryFile(suffix=".pftrace") as file:  # read from the page cache
        file.write(data)
        file.flush()
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        ours = _cpu(lambda: summarize(file.name), 3)
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    reference = _cpu(lambda: Trace.FromString(data), 3)
    print(f"trace: {size_mb:.1f} MB of SDK-shaped track events")
    print(f"summary: {size_mb / ours:.1f} MB/s CPU, {ours * 1000 / size_mb:.1f} s per GB")
    print(
        f"reference (upb Trace.FromString, whole trace in memory): {size_mb / reference:.1f} MB/s"
    )
    print(f"ratio summary/reference CPU time: {ours / reference:.2f}")
    print(f"peak RSS growth while summarizing: {(after - before) / 1024:.1f} MiB")


if __name__ == "__main__":
    main()
