"""`perfetto-trace report`'s decoding time on a 100 MB trace (goal: at most 2 s).

Run: `.venv/bin/python packages/client/benchmarks/bench_report.py [--runs N]`. Records a
call-heavy program (fib(30) and 100,000 `json.dumps`: about 100 MB, 6.8 million events) with
`perfetto-trace run` into a scratch directory, then times the decoding of the file
(`_report.read_trace`, all of the command's work but printing) in process CPU time and wall
time, median of RUNS runs, in the build the environment selects (PERFETTO_PY_PURE=1: pure).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from perfetto_client._tracer import _slices
from perfetto_client._tracer._report import read_trace

PROGRAM = """\
import json

def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)

def mix(n):
    return len([json.dumps({"i": i, "s": str(i)}) for i in range(n)])

fib(30)
mix(100_000)
"""
GOAL_S = 2.0


def main() -> None:
    """Records the trace, decodes it RUNS times and prints the medians."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    build = "compiled" if _slices.__file__.endswith(".so") else "pure"
    with tempfile.TemporaryDirectory() as scratch:
        script = Path(scratch) / "heavy.py"
        script.write_text(PROGRAM)
        trace = Path(scratch) / "heavy.pftrace"
        subprocess.run(
            [Path(sys.executable).parent / "perfetto-trace", "run", "-q", "-o", trace, script],
            check=True,
            cwd=scratch,
        )
        cpu, wall = [], []
        for _ in range(args.runs):
            started_cpu, started_wall = time.process_time(), time.perf_counter()
            reader = read_trace(str(trace), 20)
            cpu.append(time.process_time() - started_cpu)
            wall.append(time.perf_counter() - started_wall)
        size = trace.stat().st_size
    cpu_s, wall_s = statistics.median(cpu), statistics.median(wall)
    print(
        f"report, {build}: {size / 1e6:.1f} MB, {reader.calls:,} calls: {cpu_s:.2f} s CPU, "
        f"{wall_s:.2f} s wall (median of {args.runs}); per 100 MB {cpu_s * 1e8 / size:.2f} s "
        f"CPU, goal {GOAL_S:.0f} s"
    )


if __name__ == "__main__":
    main()
