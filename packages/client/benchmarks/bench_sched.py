"""`perfetto-trace run --sched`'s overhead over `perfetto-trace run` (issue #28's goal: +10 %).

Run as root (tracefs): `.venv/bin/python packages/client/benchmarks/bench_sched.py [--runs N]`.
Two programs run under each command line as a user types it, in a subprocess, interleaved
round by round (the machine is shared): an empty one (what --sched costs whatever the program:
loading the probes and their protobuf messages, setting the ftrace instance up and removing
it), and bench_tracer's mix, ROUNDS times on each of two threads that also sleep (about 3 s of
CPU). Per case: the median over RUNS runs of the process's CPU time (user + system, every
thread: --sched's thread that reads and parses the ring buffers included) and of its wall
time, from exec to exit, and the trace's size; then --sched's cost over run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORKLOAD = """\
import sys, threading, time
sys.path.insert(0, {benchmarks!r})
from bench_tracer import mix

def work():
    for _ in range({rounds}):
        mix()
        time.sleep(0.02)

threads = [threading.Thread(target=work, name=f"worker {{i}}") for i in range(2)]
for t in threads:
    t.start()
for t in threads:
    t.join()
"""

BIN = Path(sys.executable).parent


def run(command: list[str], cwd: str) -> tuple[float, float]:
    """CPU seconds and wall seconds of one run of `command`."""
    start = time.perf_counter()
    proc = subprocess.Popen(command, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.stderr is not None
    stderr = proc.stderr.read().decode()
    proc.stderr.close()
    if proc.returncode != 0 or "--sched:" in stderr:
        sys.exit(f"bench_sched: {' '.join(command)} failed:\n{stderr}")
    return usage.ru_utime + usage.ru_stime, wall


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--rounds", type=int, default=12, help="mix() per thread")
    args = parser.parse_args()
    benchmarks = str(Path(__file__).resolve().parent)
    with tempfile.TemporaryDirectory() as tmp:
        programs = {"empty": "pass\n", "mix": WORKLOAD.format(benchmarks=benchmarks, **vars(args))}
        for name, text in programs.items():
            (Path(tmp) / f"{name}.py").write_text(text)
        trace = str(BIN / "perfetto-trace")
        cases = {
            (program, option): [
                trace,
                "run",
                "-q",
                *option.split(),
                "-o",
                f"{program}{option}.pftrace",
                f"{program}.py",
            ]
            for program in programs
            for option in ("", "--sched")
        }
        times: dict[tuple[str, str], list[tuple[float, float]]] = {case: [] for case in cases}
        sizes: dict[tuple[str, str], int] = {}
        run(cases["empty", ""], tmp)  # warm the page cache
        for _ in range(args.runs):
            for case, command in cases.items():
                times[case].append(run(command, tmp))
                sizes[case] = os.path.getsize(Path(tmp) / f"{case[0]}{case[1]}.pftrace")
    print(f"perfetto-trace run --sched vs run, median of {args.runs} interleaved runs")
    print(f"{'program':<9}{'case':<14}{'CPU s':>9}{'wall s':>9}{'trace':>12}")
    medians = {}
    for (program, option), samples in times.items():
        cpu = statistics.median(s[0] for s in samples)
        wall = statistics.median(s[1] for s in samples)
        medians[program, option] = (cpu, wall)
        name = f"run {option}".strip()
        size = sizes[program, option] / 1e6
        print(f"{program:<9}{name:<14}{cpu:>9.3f}{wall:>9.3f}{size:>9.2f} MB")
    for program in programs:
        (cpu, wall), (cpu_sched, wall_sched) = medians[program, ""], medians[program, "--sched"]
        print(
            f"{program}: --sched costs {(cpu_sched - cpu) * 1e3:+.0f} ms CPU "
            f"({(cpu_sched / cpu - 1) * 100:+.1f} %), {(wall_sched - wall) * 1e3:+.0f} ms wall "
            f"({(wall_sched / wall - 1) * 100:+.1f} %)"
        )


if __name__ == "__main__":
    main()
