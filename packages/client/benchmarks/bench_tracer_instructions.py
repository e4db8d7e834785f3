"""Instructions per recorded call, perfetto-trace against viztracer, counted by callgrind.

Run: `PYTHON packages/client/benchmarks/bench_tracer_instructions.py` (valgrind installed; run it
with each interpreter to compare: 3.11's profile hook, 3.12+'s sys.monitoring recorder). The
workloads are bench_tracer.py's (fib smaller: callgrind runs ~50x slower). Each tracer starts
and stops in process; every case runs in its own process under callgrind, which counts only
inside the call that runs the workload (it is run through `itertools.starmap`, and callgrind
collects inside `starmap_next` alone), so imports, start and stop are not counted:

    per call = (traced - untraced) / calls

where calls is what the tracer recorded (Python and builtin calls). The floor is CPython's
dispatch of the events to our hook: ours per call less the instructions in perfetto_client's
compiled modules and their clock reads (callgrind's profile of the same run). viztracer's
save() (its JSON) is not counted: that is the recording alone. Bytes per call: our trace file
against viztracer's JSON, from a run outside callgrind.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_tracer import fib, mix
from perfetto_testing import loop_instructions, report_row

WORKLOADS: dict[str, Callable[[], object]] = {"fib(20)": lambda: fib(20), "mix": mix}
# Each workload's row in the README's performance table.
ROW_KEYS = {"fib(20)": "tracer_fib", "mix": "tracer_mixed"}
CASES = ("untraced", "ours", "viztracer")


def child(case: str, workload: str, out: str, save: bool) -> None:
    """Runs one case and prints `calls bytes`."""
    from perfetto_client._tracer import record
    from viztracer import VizTracer  # type: ignore[import-untyped]

    workload_only = WORKLOADS[workload]

    def work() -> None:
        list(itertools.starmap(workload_only, [()]))  # what callgrind counts

    calls = size = 0
    if case == "untraced":
        work()
    elif case == "ours":
        with record(out) as rec:
            work()
        assert rec.summary is not None
        calls, size = rec.summary.events_written // 2, rec.summary.size
    else:
        tracer = VizTracer(output_file=out, verbose=0, tracer_entries=3_000_000)
        tracer.start()
        work()
        tracer.stop()
        if save:
            tracer.save()
            with open(out) as f:
                calls = sum(1 for e in json.load(f)["traceEvents"] if e.get("ph") == "X")
            size = os.path.getsize(out)
    print(calls, size)


def instructions(case: str, workload: str, out: str, profile: str = "/dev/null") -> int:
    """The instructions of the workload's run in `case`; callgrind's profile goes to `profile`."""
    return loop_instructions([sys.executable, __file__, "--child", case, workload, out], profile)


def own_instructions(profile: str) -> int:
    """The instructions in a callgrind profile spent in perfetto_client's compiled modules and
    the clock reads they make: the recorder's own code, without CPython's dispatch to it."""
    proc = subprocess.run(
        ["callgrind_annotate", "--inclusive=no", "--threshold=100", profile],
        capture_output=True,
        text=True,
        check=True,
    )
    own = 0
    for line in proc.stdout.splitlines():
        match = re.match(r"\s*([\d,]+) \(.*?\)\s+(.*)$", line)
        if match and ("/perfetto_client/" in match[2] or ":clock_gettime" in match[2]):
            own += int(match[1].replace(",", ""))
    return own


def sizes(case: str, workload: str, out: str) -> tuple[int, int]:
    cmd = [sys.executable, __file__, "--child", case, workload, out, "--save"]
    calls, size = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.split()
    return int(calls), int(size)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--child", nargs=3, metavar=("CASE", "WORKLOAD", "OUT"))
    parser.add_argument("--save", action="store_true")
    args = parser.parse_args()
    if args.child:
        case, workload, out = args.child
        child(case, workload, out, args.save)
        return
    from perfetto_client._tracer import _engine

    recorder = _engine.hook_module().ThreadRecorder.__module__.rsplit(".", 1)[-1]
    print(f"python {sys.version.split()[0]}, our recorder: {recorder}")
    tmp = tempfile.mkdtemp(prefix="bench-instructions-")
    for workload in WORKLOADS:
        counts = {}
        profile = os.path.join(tmp, "ours.callgrind")
        for case in CASES:
            out = os.path.join(tmp, f"{case}.{'json' if case == 'viztracer' else 'pftrace'}")
            profile_to = profile if case == "ours" else "/dev/null"
            counts[case] = instructions(case, workload, out, profile_to)
        print(f"\n{workload}: untraced {counts['untraced']:,} instructions")
        per_call = {}
        for case in ("ours", "viztracer"):
            out = os.path.join(tmp, f"{case}.{'json' if case == 'viztracer' else 'pftrace'}")
            calls, size = sizes(case, workload, out)
            per_call[case] = (counts[case] - counts["untraced"]) / calls
            print(
                f"  {case:<10} {calls:>8,} calls  {per_call[case]:>8,.0f} instructions/call"
                f"  {size / calls:>6.1f} bytes/call"
            )
            if case == "ours":
                ours_bytes, ours_calls = size / calls, calls
        # The floor: CPython's dispatch of each call's events to a hook, what is left of ours
        # without the recorder's own instructions.
        floor = per_call["ours"] - own_instructions(profile) / ours_calls
        print(
            f"  ours / viztracer: {per_call['ours'] / per_call['viztracer']:.2f}x instructions"
            f" per call, {ours_bytes / (size / calls):.3f}x bytes per call; CPython's dispatch"
            f" to our recorder {floor:,.0f} per call ({floor / per_call['viztracer']:.2f}x)"
        )
        report_row(
            ROW_KEYS[workload],
            measured=per_call["ours"],
            reference=per_call["viztracer"],
            cost_ratio=per_call["ours"] / per_call["viztracer"],
            unit="instructions",
            reference_name="viztracer",
            floor=f"CPython's dispatch {floor:,.0f} instructions "
            f"({floor / per_call['viztracer']:.2f}x)",
        )


if __name__ == "__main__":
    main()
