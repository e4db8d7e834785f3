"""Instructions per call of the client's track event paths, counted by callgrind.

Run: `.venv/bin/python packages/client/benchmarks/bench_client_instructions.py` (valgrind
installed). The cases are bench_client.py's loops (N calls each), each in its own process under
callgrind, which counts only inside the loop (run through `itertools.starmap`: callgrind
collects inside `starmap_next` alone), so imports and the session's start are not counted:

    per call = (case - its baseline) / N

the baseline being a plain call for @trace and an empty loop for the others. Load-independent,
unlike bench_client.py's CPU times. Each row's floor is the same call with its category
disabled: what the call and the check cost, before anything is written.
"""

from __future__ import annotations

import itertools
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_client
from perfetto_testing import loop_instructions, report_row

CASES = {
    "@trace call, category enabled": ("traced_on", "plain"),
    "with trace_event(...), two int args": ("trace_event", "empty"),
    'instant(cat, "n")': ("instant", "empty"),
    "counter(cat, track, i)": ("counter", "empty"),
    "@trace call, category disabled": ("traced_off", "plain"),
    "with trace_event(...), category disabled": ("trace_event_off", "empty"),
    'instant(cat, "n"), category disabled': ("instant_off", "empty"),
    "counter(cat, track, i), category disabled": ("counter_off", "empty"),
    "viztracer add_instant": ("viztracer_instant", "empty"),
    "viztracer add_counter": ("viztracer_counter", "empty"),
    'viztracer with log_event("step")': ("viztracer_log_event", "empty"),
    "viztracer, the plain call recorded": ("viztracer", "plain"),
}
LOOPS = {
    "plain": bench_client.loop_plain,
    "traced_on": bench_client.loop_traced_on,
    "traced_off": bench_client.loop_traced_off,
    "trace_event_off": bench_client.loop_trace_event_off,
    "instant_off": bench_client.loop_instant_off,
    "counter_off": bench_client.loop_counter_off,
    "empty": bench_client.loop_empty_with,
    "trace_event": bench_client.loop_trace_event,
    "instant": bench_client.loop_instant,
    "counter": bench_client.loop_counter,
    "viztracer_instant": bench_client.loop_viztracer_instant,
    "viztracer_counter": bench_client.loop_viztracer_counter,
    "viztracer_log_event": bench_client.loop_viztracer_log_event,
    "viztracer": bench_client.loop_viztracer,
}
# The README performance table's rows: key -> (our case, viztracer's case, its name, the floor).
ROWS = {
    "instant": (
        'instant(cat, "n")',
        "viztracer add_instant",
        "viztracer `add_instant`",
        'instant(cat, "n"), category disabled',
    ),
    "counter": (
        "counter(cat, track, i)",
        "viztracer add_counter",
        "viztracer `add_counter`",
        "counter(cat, track, i), category disabled",
    ),
    "trace_event": (
        "with trace_event(...), two int args",
        'viztracer with log_event("step")',
        "viztracer `with log_event(...)`",
        "with trace_event(...), category disabled",
    ),
    "trace_decorator": (
        "@trace call, category enabled",
        "viztracer, the plain call recorded",
        "viztracer recording the call",
        "@trace call, category disabled",
    ),
}


def child(loop: str) -> None:
    """Runs one loop in a recording session (what callgrind counts)."""
    session = bench_client.start_session()
    list(itertools.starmap(LOOPS[loop], [()]))
    session.stop()


def instructions(loop: str) -> int:
    return loop_instructions([sys.executable, __file__, "--child", loop])


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2])
        return
    counts = {loop: instructions(loop) for loop in LOOPS}
    build = "compiled" if bench_client._compiled() else "pure"
    print(f"perfetto_client hot paths ({build} build), instructions per call (callgrind)")
    print("| path | instructions per call |")
    print("|---|---|")
    per_call = {
        label: (counts[loop] - counts[baseline]) / bench_client.N
        for label, (loop, baseline) in CASES.items()
    }
    for label, value in per_call.items():
        print(f"| {label} | {value:,.0f} |")
    for key, (ours, theirs, name, floor) in ROWS.items():
        report_row(
            key,
            measured=per_call[ours],
            reference=per_call[theirs],
            cost_ratio=per_call[ours] / per_call[theirs],
            unit="instructions",
            reference_name=name,
            floor=f"category disabled {per_call[floor]:,.0f} instructions",
        )


if __name__ == "__main__":
    main()
