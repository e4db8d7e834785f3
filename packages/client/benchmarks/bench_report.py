"""`perfetto-trace report`'s decoding time on a 100 MB trace (goal: at most 2 s), and its
HTML page's (goal: at most 2x the text report's).

Run: `.venv/bin/python packages/client/benchmarks/bench_report.py [--runs N] [--fib N]`.
Records a call-heavy program (fib(30) and 100,000 `json.dumps`: about 100 MB, 6.8 million
events; a smaller `--fib` for the pure build) with `perfetto-trace run` into a scratch
directory, then times the decoding of the file (`_report.read_trace`, all of the text
command's work but printing) and the writing of its page (`write_html_report`) in process CPU
time and wall time, median of RUNS runs each, in the build the environment selects
(PERFETTO_PY_PURE=1: pure).
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
from perfetto_client._tracer._html_report import write_html_report
from perfetto_client._tracer._report import read_trace

PROGRAM = """\
import json

def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)

def mix(n):
    return len([json.dumps({"i": i, "s": str(i)}) for i in range(n)])

fib(FIB)
mix(100_000)
"""
GOAL_S = 2.0
HTML_GOAL = 2.0


def main() -> None:
    """Records the trace, decodes it RUNS times and prints the medians."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--fib", type=int, default=30)
    args = parser.parse_args()
    build = "compiled" if _slices.__file__.endswith(".so") else "pure"
    with tempfile.TemporaryDirectory() as scratch:
        script = Path(scratch) / "heavy.py"
        script.write_text(PROGRAM.replace("FIB", str(args.fib)))
        trace = Path(scratch) / "heavy.pftrace"
        subprocess.run(
            [Path(sys.executable).parent / "perfetto-trace", "run", "-q", "-o", trace, script],
            check=True,
            cwd=scratch,
        )
        cpu, wall, html_cpu, html_wall = [], [], [], []
        for _ in range(args.runs):
            started_cpu, started_wall = time.process_time(), time.perf_counter()
            reader = read_trace(str(trace), 20)
            cpu.append(time.process_time() - started_cpu)
            wall.append(time.perf_counter() - started_wall)
            started_cpu, started_wall = time.process_time(), time.perf_counter()
            write_html_report(str(trace), str(Path(scratch) / "heavy.html"), 20, [])
            html_cpu.append(time.process_time() - started_cpu)
            html_wall.append(time.perf_counter() - started_wall)
        size = trace.stat().st_size
        page = (Path(scratch) / "heavy.html").stat().st_size
    cpu_s, wall_s = statistics.median(cpu), statistics.median(wall)
    print(
        f"report, {build}: {size / 1e6:.1f} MB, {reader.calls:,} calls: {cpu_s:.2f} s CPU, "
        f"{wall_s:.2f} s wall (median of {args.runs}); per 100 MB {cpu_s * 1e8 / size:.2f} s "
        f"CPU, goal {GOAL_S:.0f} s"
    )
    html_s = statistics.median(html_cpu)
    print(
        f"report --html, {build}: {page / 1e3:.0f} KB page, {html_s:.2f} s CPU, "
        f"{statistics.median(html_wall):.2f} s wall: {html_s / cpu_s:.2f}x the text report's "
        f"CPU (goal {HTML_GOAL:.0f}x)"
    )


if __name__ == "__main__":
    main()
