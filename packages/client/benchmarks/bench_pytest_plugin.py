"""What `pytest --perfetto` costs: pytest on 200 small tests, untraced and recorded.

Each case is pytest's own command from a scratch directory holding the tests, in a fresh
process; its figure is the CPU time (user + system) of the process, median of N runs, the
cases interleaved (the machine is shared). The bytecode caches (and pytest's rewritten ones:
it rewrites the asserts of the modules of a distribution with a pytest11 entry point, so
perfetto_client's) are written by a first run that is not counted, as an installed package
has them: PYTHONDONTWRITEBYTECODE would make every run compile them again. The goal:
`--perfetto` within 10 % of untraced.

    python packages/client/benchmarks/bench_pytest_plugin.py [--runs N] [--tests N]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from perfetto_testing import report_row

PYTEST = str(Path(sys.executable).parent / "pytest")
TESTS = """
import pytest


@pytest.fixture
def numbers():
    return list(range(50))


def check(n, numbers):
    return sum(numbers) + n


"""
CASES = {
    "untraced": [],
    "--perfetto": ["--perfetto", "run.pftrace"],
    "--perfetto --perfetto-calls": ["--perfetto", "calls.pftrace", "--perfetto-calls"],
}


def cpu_seconds(argv: list[str], cwd: str, env: dict[str, str]) -> float:
    """CPU seconds of one run of `argv`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(argv, check=False, cwd=cwd, env=env, capture_output=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"{' '.join(argv)} exited with {done.returncode}: {done.stdout.decode()[-800:]}")
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--tests", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench_pytest_plugin-") as scratch:
        body = "".join(
            f"def test_{i}(numbers):\n    assert check({i}, numbers) == {1225 + i}\n\n\n"
            for i in range(args.tests)
        )
        Path(scratch, "test_many.py").write_text(TESTS + body)
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("PYTEST_") and k != "PYTHONDONTWRITEBYTECODE"
        }
        env["PYTHONPYCACHEPREFIX"] = os.path.join(scratch, "pycache")
        base = [PYTEST, "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "test_many.py"]
        samples: dict[str, list[float]] = {label: [] for label in CASES}
        for run in range(args.runs + 1):
            for label, extra in CASES.items():
                seconds = cpu_seconds([*base, *extra], scratch, env)
                if run:
                    samples[label].append(seconds)
    untraced = statistics.median(samples["untraced"])
    print(f"pytest, {args.tests} tests, CPU seconds, median of {args.runs}:")
    for label, values in samples.items():
        median = statistics.median(values)
        print(f"  {label:30} {median:6.3f} s  {median / untraced:5.2f}x untraced")
    traced = statistics.median(samples["--perfetto"])
    report_row(
        "pytest_plugin",
        measured=traced,
        reference=untraced,
        cost_ratio=traced / untraced,
        unit="s CPU",
        reference_name=f"plain pytest, {args.tests} tests",
        floor="plain pytest: 1x",
    )


if __name__ == "__main__":
    main()
