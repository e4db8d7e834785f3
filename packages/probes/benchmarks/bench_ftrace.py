"""CPU per ftrace event of the page parser, compiled and pure, over pages captured from a
sched workload on this machine's tracefs (not a timed test).

Run as root (tracefs): python3 tools/dev.py run python packages/probes/benchmarks/bench_ftrace.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent / "tests"
sys.path.insert(0, str(TESTS))

from ftrace_testlib import SCHED_EVENTS, Capture, PingPong, capture, read_packet  # noqa: E402
from perfetto_probes import ProbesError  # noqa: E402
from perfetto_probes.ftrace._tracefs import find_tracefs  # noqa: E402
from protozero import _native  # noqa: E402

PURE_CHILD = "--parse"


def _measure(directory: Path, compact: bool) -> tuple[int, float]:
    """(events, CPU seconds per event) of the best of 5 parses of the captured pages (the
    pages already in memory, the layouts made)."""
    pages = Capture(directory)
    events = sum(
        len(p.ftrace_events.event)
        + len(p.ftrace_events.compact_sched.switch_timestamp)
        + len(p.ftrace_events.compact_sched.waking_timestamp)
        for p in map(read_packet, pages.parse(compact))
    )
    best = float("inf")
    for _ in range(5):
        start = time.process_time()
        pages.parse(compact)
        best = min(best, time.process_time() - start)
    return events, best / max(events, 1)


def _report(directory: Path) -> None:
    build = (
        "compiled"
        if _native.compiled_modules("perfetto_probes").get("perfetto_probes.ftrace._page_parser")
        else "pure"
    )
    for compact in (False, True):
        events, per_event = _measure(directory, compact)
        form = "compact_sched" if compact else "events"
        print(f"{build:8} {form:13} {events:7} events  {per_event * 1e9:8.0f} ns CPU per event")


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == PURE_CHILD:
        _report(Path(sys.argv[2]))
        return
    try:
        find_tracefs()
    except ProbesError as exc:
        print(f"bench_ftrace: no tracefs, nothing measured: {exc}")
        return
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        capture(
            directory,
            [*SCHED_EVENTS, "sched/sched_wakeup_new", "task/task_newtask"],
            PingPong(5000).run,
        )
        print(
            f"pages captured: {sum(p.stat().st_size for p in directory.glob('cpu*.pages')) // 4096}"
        )
        _report(directory)
        clean = {k: v for k, v in os.environ.items() if not k.startswith("PERFETTO_PY_")}
        subprocess.run(
            [sys.executable, __file__, PURE_CHILD, str(directory)],
            env={**clean, _native.PURE_ENV: "1"},
            check=True,
        )
    print(
        "the parser alone: bench_vs_upstream_probes.py measures the whole traced_probes against"
        " upstream's"
    )


if __name__ == "__main__":
    main()
