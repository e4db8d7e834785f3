"""Start-up cost of the commands: CPU seconds over `python empty.py` measured in the same run.

Each command runs the way a user types it, from a scratch directory, on an empty script, in a
fresh process; its figure is the CPU time (user + system, children included: heap_profile's
`traced` and daemon) over `python empty.py`, median of N runs, the commands interleaved (the
machine is shared). Both builds in one run: compiled (the `.so` files built in place) and pure
(PERFETTO_PY_PURE=1); `--this-build-only` measures only the build the environment selects.
`viztracer empty.py` (when viztracer is installed beside) is the reference for
`perfetto-trace run`, measured in the same run; `--only TEXT` measures only the commands whose
label contains TEXT (and the references). heap_profile gets private socket paths, so that it
starts its own `traced` and daemon. The bytecode caches are written (to the scratch
directory) by a first run that is not counted, as an installed package has them:
PYTHONDONTWRITEBYTECODE would make every run compile every module.

    python packages/client/benchmarks/bench_startup.py [--runs N] [--this-build-only] [--only TEXT]
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

BIN = Path(sys.executable).parent
INITIALIZE = (
    "import perfetto_client as p; p.Tracing.initialize(p.Backend.IN_PROCESS)",
    "import perfetto_client + Tracing.initialize(IN_PROCESS)",
)
REFERENCE = "python empty.py"
RUN = "perfetto-trace run empty.py"
# label -> (argv, its exit status, goal compiled, goal pure in seconds over the reference)
COMMANDS: dict[str, tuple[list[str], int, float, float]] = {
    REFERENCE: ([sys.executable, "empty.py"], 0, 0.0, 0.0),
    RUN: ([f"{BIN}/perfetto-trace", "run", "empty.py"], 0, 0.10, 0.15),
    "perfetto --help": ([f"{BIN}/perfetto", "--help"], 1, 0.15, 0.15),
    "heap_profile -- empty.py": ([f"{BIN}/heap_profile", "--", "empty.py"], 0, 0.30, 0.30),
    INITIALIZE[1]: ([sys.executable, "-c", INITIALIZE[0]], 0, 0.04, 0.10),
}
VIZTRACER = "viztracer empty.py (reference)"
if (BIN / "viztracer").exists():  # its JSON goes to the scratch directory, like our trace
    COMMANDS[VIZTRACER] = ([f"{BIN}/viztracer", "--quiet", "empty.py"], 0, 0.0, 0.0)


def cpu_seconds(argv: list[str], status: int, cwd: str, env: dict[str, str]) -> float:
    """CPU seconds of one run of `argv` (and the children it waited for)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(argv, check=False, cwd=cwd, env=env, capture_output=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != status:
        sys.exit(f"{' '.join(argv)} exited with {done.returncode}: {done.stderr.decode()[-500:]}")
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def build_env(pure: bool, scratch: str) -> dict[str, str]:
    """The environment of one build, with private sockets for heap_profile."""
    unset = ("PERFETTO_PY_PURE", "PYTHONDONTWRITEBYTECODE")
    env = {k: v for k, v in os.environ.items() if k not in unset}
    env["PYTHONPYCACHEPREFIX"] = os.path.join(scratch, "pycache")
    if pure:
        env["PERFETTO_PY_PURE"] = "1"
    env["PERFETTO_PRODUCER_SOCK_NAME"] = os.path.join(scratch, "producer")
    env["PERFETTO_CONSUMER_SOCK_NAME"] = os.path.join(scratch, "consumer")
    env["PERFETTO_HEAPPROFD_SOCK_NAME"] = os.path.join(scratch, "heapprofd")
    return env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--this-build-only", action="store_true")
    parser.add_argument("--only", default="", metavar="TEXT")
    args = parser.parse_args()
    commands = {
        label: command
        for label, command in COMMANDS.items()
        if label in (REFERENCE, VIZTRACER) or args.only in label
    }
    if args.this_build_only:
        builds = ["pure" if os.environ.get("PERFETTO_PY_PURE") == "1" else "compiled"]
    else:
        builds = ["compiled", "pure"]
    with tempfile.TemporaryDirectory(prefix="bench_startup-") as scratch:
        Path(scratch, "empty.py").write_text("")
        envs = {build: build_env(build == "pure", scratch) for build in builds}
        samples: dict[tuple[str, str], list[float]] = {}
        for run in range(args.runs + 1):
            for build in builds:
                for label, (argv, status, _, _) in commands.items():
                    spent = cpu_seconds(argv, status, scratch, envs[build])
                    if run:  # the first run writes the bytecode caches
                        samples.setdefault((build, label), []).append(spent)
    med = {key: statistics.median(values) for key, values in samples.items()}
    load = os.getloadavg()[0]
    print(
        f"start-up on Python {sys.version.split()[0]}, CPU s over `python empty.py` in the same "
        f"run, median of {args.runs} (load average {load:.1f})"
    )
    print("| command | " + " | ".join(builds) + " | goal |")
    print("|---|" + "---|" * len(builds) + "---|")
    bare = " | ".join(f"{med[(b, REFERENCE)]:.3f} s" for b in builds)
    print(f"| {REFERENCE} (reference) | {bare} | |")
    if VIZTRACER in commands:
        cells = [f"+{med[(b, VIZTRACER)] - med[(b, REFERENCE)]:.3f}" for b in builds]
        print(f"| {VIZTRACER} | " + " | ".join(cells) + " | |")
    for label, (_, _, goal_compiled, goal_pure) in commands.items():
        if label in (REFERENCE, VIZTRACER):
            continue
        below_viztracer = label == RUN and VIZTRACER in commands
        cells = []
        for build in builds:
            over = med[(build, label)] - med[(build, REFERENCE)]
            goal = goal_compiled if build == "compiled" else goal_pure
            if below_viztracer:
                goal = med[(build, VIZTRACER)] - med[(build, REFERENCE)]
            cells.append(f"+{over:.3f}{'' if over <= goal else ' (OVER)'}")
        goals = f"≤ +{goal_compiled:.2f} / +{goal_pure:.2f}"
        if below_viztracer:
            goals = "below viztracer's"
        print(f"| {label} | " + " | ".join(cells) + f" | {goals} |")
    if "compiled" in builds and RUN in commands and VIZTRACER in commands:
        ours = med[("compiled", RUN)] - med[("compiled", REFERENCE)]
        theirs = med[("compiled", VIZTRACER)] - med[("compiled", REFERENCE)]
        report_row(
            "startup_run",
            measured=ours * 1e3,
            reference=theirs * 1e3,
            cost_ratio=ours / theirs,
            unit="ms CPU over `python empty.py`",
            reference_name="`viztracer empty.py`",
            floor=f"`python empty.py` {med[('compiled', REFERENCE)] * 1e3:.0f} ms",
        )


if __name__ == "__main__":
    main()
