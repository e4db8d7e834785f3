"""perfetto-trace's overhead and trace size against an untraced run and viztracer.

Run: `.venv/bin/python packages/client/benchmarks/bench_tracer.py [--runs N]`. Two workloads,
every Python and builtin call recorded: recursive fib(25), and a small pyperformance-like mix
(method calls, dict/list/str work, generators, a recursive tree walk). Each case runs in this
process, timed in process CPU time from start to the trace being on disk (ours streams;
viztracer's JSON is written by save(), shown separately), median of RUNS runs, interleaved
round by round (the machine is shared). "floor (pure)" is an empty Python-level
`sys.setprofile` callback: the least any pure-Python hook can cost. Overhead = traced -
untraced; the ratio column is our overhead / viztracer's. Size: trace bytes per recorded
call, ours vs viztracer's JSON.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

from perfetto_client._tracer import record
from viztracer import VizTracer  # type: ignore[import-untyped]

clock = time.process_time


def fib(n: int) -> int:
    return n if n < 2 else fib(n - 1) + fib(n - 2)


class Node:
    def __init__(self, value: int, children: list[Node]) -> None:
        self.value = value
        self.children = children

    def total(self) -> int:
        return self.value + sum(child.total() for child in self.children)


def build(depth: int) -> Node:
    return Node(depth, [build(depth - 1) for _ in range(2)] if depth else [])


class Account:
    def __init__(self) -> None:
        self.balance = 0
        self.history: list[int] = []

    def deposit(self, amount: int) -> None:
        self.balance += amount
        self.history.append(amount)


def words(n: int) -> dict[str, int]:
    counts: dict[str, int] = {}
    for i in range(n):
        word = f"w{i % 97}"
        counts[word] = counts.get(word, 0) + 1
    return counts


def squares(n: int) -> int:
    return sum(i * i for i in range(n) if i % 3)


def mix() -> int:
    total = build(11).total()
    account = Account()
    for i in range(3000):
        account.deposit(i)
    total += account.balance + len(words(6000)) + squares(20000)
    text = ",".join(str(i) for i in range(3000))
    total += len(json.loads(json.dumps(text.split(","))))
    return total


WORKLOADS: dict[str, Callable[[], object]] = {"fib(25)": lambda: fib(25), "mix": mix}


def untraced(work: Callable[[], object], out: str) -> tuple[float, int, int]:
    start = clock()
    work()
    return clock() - start, 0, 0


def ours(pure: bool) -> Callable[[Callable[[], object], str], tuple[float, int, int]]:
    def run(work: Callable[[], object], out: str) -> tuple[float, int, int]:
        start = clock()
        with record(out, pure=pure) as rec:
            work()
        elapsed = clock() - start
        assert rec.summary is not None
        return elapsed, rec.summary.size, rec.summary.events_written // 2

    return run


def _empty_profile(frame: object, event: str, arg: object) -> None:
    pass


def floor(work: Callable[[], object], out: str) -> tuple[float, int, int]:
    """The cheapest Python-level `sys.setprofile` callback: the pure hook's lower bound."""
    start = clock()
    sys.setprofile(_empty_profile)
    work()
    sys.setprofile(None)
    return clock() - start, 0, 0


def viztracer(work: Callable[[], object], out: str) -> tuple[float, int, int]:
    tracer = VizTracer(output_file=out, verbose=0, tracer_entries=3_000_000)
    start = clock()
    tracer.start()
    work()
    tracer.stop()
    elapsed = clock() - start
    save_start = clock()
    tracer.save()
    viztracer.save_time = clock() - save_start  # type: ignore[attr-defined]
    with open(out) as f:
        calls = sum(1 for e in json.load(f)["traceEvents"] if e.get("ph") == "X")
    return elapsed, os.path.getsize(out), calls


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    compiled = importlib.util.find_spec("perfetto_client._tracer._hook") is not None
    cases: dict[str, Callable[[Callable[[], object], str], tuple[float, int, int]]] = {
        "untraced": untraced,
        "viztracer": viztracer,
        "ours (pure)": ours(True),
        "floor (pure)": floor,
    }
    if compiled:
        cases["ours (compiled)"] = ours(False)
    else:
        print("the compiled hook is not built: only the pure build is measured")
    tmp = tempfile.mkdtemp(prefix="bench-tracer-")
    for name, work in WORKLOADS.items():
        times: dict[str, list[float]] = {case: [] for case in cases}
        sizes: dict[str, tuple[int, int]] = {}
        saves: list[float] = []
        for _ in range(args.runs):
            for case, run in cases.items():
                gc.collect()
                out = os.path.join(tmp, "vt.json" if case == "viztracer" else "ours.pftrace")
                elapsed, size, calls = run(work, out)
                times[case].append(elapsed)
                sizes[case] = (size, calls)
                if case == "viztracer":
                    saves.append(viztracer.save_time)  # type: ignore[attr-defined]
        base = statistics.median(times["untraced"])
        viz = statistics.median(times["viztracer"]) - base
        print(f"\n{name}: untraced {base * 1e3:.1f} ms (median of {args.runs}, CPU time)")
        print(
            f"{'case':<18}{'traced ms':>10}{'overhead ms':>13}{'vs viztracer':>14}"
            f"{'calls':>10}{'bytes/call':>12}"
        )
        for case in cases:
            if case == "untraced":
                continue
            t = statistics.median(times[case])
            size, calls = sizes[case]
            print(
                f"{case:<18}{t * 1e3:>10.1f}{(t - base) * 1e3:>13.1f}"
                f"{(t - base) / viz:>13.2f}x{calls:>10}{size / max(calls, 1):>12.1f}"
            )
        viz_size, viz_calls = sizes["viztracer"]
        print(f"viztracer save() (JSON to disk): {statistics.median(saves) * 1e3:.1f} ms more")
        for case in cases:
            if case.startswith("ours"):
                size, calls = sizes[case]
                ratio = (size / max(calls, 1)) / (viz_size / max(viz_calls, 1))
                print(f"trace size per call, {case} / viztracer: {ratio:.3f}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
