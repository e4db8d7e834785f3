"""Import cost of perfetto_service: what a program pays before it does anything.

Each statement runs in a fresh interpreter; the figure is the child's CPU time (user +
system) over a bare interpreter's (`python -c pass`), median of N runs. Reference, measured in
the same run: `import asyncio` (every IPC path needs it). Budget: `import perfetto_service`
at most 150 ms over a bare interpreter.

    python packages/service/benchmarks/bench_import.py [--runs N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

BUDGET_MS = 150.0
REFERENCE = "import asyncio"
STATEMENTS = [
    "import perfetto_service",
    "from perfetto_service import Producer, Consumer",
    "from perfetto_service import ConsumerIPCClient",
    "from perfetto_service import ProducerIPCClient",
    "from perfetto_service import TracingService, ServiceIPCHost",
]


def cpu_ms(statement: str) -> float:
    """CPU milliseconds of one fresh interpreter running `statement`."""
    before = os.times()
    subprocess.run([sys.executable, "-c", statement], check=True)
    after = os.times()
    cpu = (after.children_user - before.children_user) + (
        after.children_system - before.children_system
    )
    return cpu * 1000.0


def median_ms(statement: str, runs: int) -> float:
    return statistics.median(cpu_ms(statement) for _ in range(runs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()
    bare = median_ms("pass", args.runs)
    reference = median_ms(REFERENCE, args.runs) - bare
    print(f"bare interpreter: {bare:.0f} ms CPU; reference `{REFERENCE}`: +{reference:.0f} ms")
    for statement in STATEMENTS:
        cost = median_ms(statement, args.runs) - bare
        ratio = cost / reference if reference > 0 else float("nan")
        print(f"  {statement:<62} +{cost:5.0f} ms  ({ratio:.2f}x reference)")
        if statement == STATEMENTS[0]:
            verdict = "within" if cost <= BUDGET_MS else "OVER"
            print(f"    {verdict} the {BUDGET_MS:.0f} ms budget")


if __name__ == "__main__":
    main()
