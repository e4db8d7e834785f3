"""Our traced_probes against upstream's traced_probes: CPU per ftrace event and events lost,
with our traced as the service for both (so only the probes differ).

Each session: our `traced` on temporary sockets, the traced_probes under test connected to it
(registered: TRACED_PROBES_NOTIFY_FD, which both honour), a workload running, then our
`perfetto` command recording `--seconds` of `linux.ftrace` into a 64 MiB buffer. Two workloads:

* sched: `--pairs` pairs of processes ping-ponging a byte through pipes; `sched/sched_switch`
  and `sched/sched_waking` in compact_sched, buffer_size_kb 4096. Measured: the traced_probes
  process's CPU (utime+stime: the sum of its threads' /proc/PID/task/TID/schedstat, in ns) from
  before the `perfetto` command starts to after it exits, per ftrace event that arrived in the
  trace (compact_sched switches and wakings plus typed events);
* storm: the same pairs plus `--pairs` processes forking and reaping children as fast as they
  can; sched_switch, sched_waking, sched_wakeup_new, sched_process_fork, sched_process_exit,
  sched_process_free and task_newtask (compact_sched), buffer_size_kb `--storm-buffer-kb`
  (512). Measured: events lost: the kernel's overruns (FtraceStats' END_OF_TRACE `overrun`
  minus START_OF_TRACE's, summed over CPUs) and the bundles flagged `lost_events`.

The trace is read with upstream's schema (the PyPI `perfetto` package). The reference is
`--upstream-traced-probes` or PERFETTO_UPSTREAM_TRACED_PROBES (upstream's `traced_probes`
binary; it records into tracefs' top-level buffer, ours into an instance of its own). Without
it, ours is measured alone. Medians of `--runs` sessions, the probes' sessions interleaved.
Needs tracefs (root).

    PERFETTO_UPSTREAM_TRACED_PROBES=... python3 tools/dev.py run python \\
        packages/probes/benchmarks/bench_vs_upstream_probes.py [--runs N] [--seconds S]
        [--pairs N] [--storm-buffer-kb N]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import glob
import os
import select
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import FtraceStats, Trace
from perfetto_probes import ProbesError
from perfetto_probes.ftrace._tracefs import find_tracefs
from perfetto_protos.config.trace_config_pb2 import TraceConfig
from protozero import _native

TIMEOUT = 60.0
WORKLOAD = "--workload"
SCHED_EVENTS = ["sched/sched_switch", "sched/sched_waking"]
STORM_EVENTS = [
    *SCHED_EVENTS,
    "sched/sched_wakeup_new",
    "sched/sched_process_fork",
    "sched/sched_process_exit",
    "sched/sched_process_free",
    "task/task_newtask",
]


# The workload (this script with --workload KIND PAIRS) --------------------------------------


def workload_main(kind: str, pairs: int) -> None:
    """Runs `pairs` ping-pong pairs (and, for `storm`, `pairs` forking loops) until killed."""
    os.setpgrp()  # the benchmark kills the whole group
    for _ in range(pairs):
        a_read, b_write = os.pipe()
        b_read, a_write = os.pipe()
        _spawn(functools.partial(_ping, a_read, a_write, True))
        _spawn(functools.partial(_ping, b_read, b_write, False))
        if kind == "storm":
            _spawn(_fork_loop)
    print("ready", flush=True)
    signal.pause()


def _spawn(body: Callable[[], None]) -> None:
    if os.fork() == 0:
        try:
            body()
        finally:
            os._exit(0)


def _ping(read_fd: int, write_fd: int, first: bool) -> None:
    if first:
        os.write(write_fd, b"x")
    while True:
        os.read(read_fd, 1)
        os.write(write_fd, b"x")


def _fork_loop() -> None:
    while True:
        child = os.fork()
        if child == 0:
            os._exit(0)
        os.waitpid(child, 0)


# Processes --------------------------------------------------------------------------------


def _cpu_seconds(pid: int) -> float:
    """utime+stime of the process's live threads, from their schedstat (ns)."""
    total = 0
    for path in glob.glob(f"/proc/{pid}/task/*/schedstat"):
        with contextlib.suppress(OSError), open(path) as schedstat:
            total += int(schedstat.read().split()[0])
    return total / 1e9


def _tids(pid: int) -> set[str]:
    return {os.path.basename(p) for p in glob.glob(f"/proc/{pid}/task/*")}


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


class Host:
    """Our traced on sockets of its own, and one traced_probes connected to it."""

    def __init__(self, probes: Sequence[str], directory: str) -> None:
        self.env = dict(os.environ)
        self.env["PERFETTO_PRODUCER_SOCK_NAME"] = f"{directory}/producer"
        self.env["PERFETTO_CONSUMER_SOCK_NAME"] = f"{directory}/consumer"
        self.traced = subprocess.Popen(
            [sys.executable, "-m", "perfetto_service.traced"],
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.probes: subprocess.Popen[bytes] | None = None
        try:
            self._wait_for_traced(f"{directory}/consumer")
            self.probes = self._start_probes(probes, directory)
        except BaseException:
            self.stop()
            raise

    def _wait_for_traced(self, consumer_socket: str) -> None:
        deadline = time.monotonic() + TIMEOUT
        while True:
            with socket.socket(socket.AF_UNIX) as probe:
                try:
                    probe.connect(consumer_socket)
                    return
                except OSError:
                    pass
            if self.traced.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("our traced did not start")
            time.sleep(0.05)

    def _start_probes(self, command: Sequence[str], directory: str) -> subprocess.Popen[bytes]:
        """Starts traced_probes; returns once it registered its data sources."""
        read_fd, write_fd = os.pipe()
        try:
            with open(f"{directory}/probes.log", "wb") as log:
                probes = subprocess.Popen(
                    command,
                    env={**self.env, "TRACED_PROBES_NOTIFY_FD": str(write_fd)},
                    pass_fds=(write_fd,),
                    stdout=log,
                    stderr=log,
                )
            os.close(write_fd)
            ready, _, _ = select.select([read_fd], [], [], TIMEOUT)
            if not ready or os.read(read_fd, 1) != b"1":
                _stop(probes)
                raise SystemExit(f"{command[0]} did not register its data sources")
        finally:
            os.close(read_fd)
        return probes

    def stop(self) -> None:
        if self.probes is not None:
            _stop(self.probes)
        _stop(self.traced)


# One session ------------------------------------------------------------------------------


def _config(events: Sequence[str], buffer_kb: int, seconds: float) -> TraceConfig:
    config = TraceConfig(duration_ms=int(seconds * 1000))
    config.buffers.add(size_kb=64 * 1024, fill_policy=TraceConfig.BufferConfig.RING_BUFFER)
    source = config.data_sources.add().config
    source.name = "linux.ftrace"
    source.ftrace_config.ftrace_events.extend(events)
    source.ftrace_config.compact_sched.enabled = True
    source.ftrace_config.buffer_size_kb = buffer_kb
    return config


@dataclass
class Session:
    """What one session measured."""

    events: int
    cpu: float
    overrun: int
    lost_bundles: int
    threads_exited: bool


def run_session(
    probes: Sequence[str], kind: str, config: TraceConfig, args: argparse.Namespace, tmp: str
) -> Session:
    """One recording of `config` while the `kind` workload runs."""
    directory = tempfile.mkdtemp(dir=tmp)
    with open(f"{directory}/config.pb", "wb") as f:
        f.write(config.SerializeToString())
    host = Host(probes, directory)
    workload: subprocess.Popen[bytes] | None = None
    try:
        workload = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), WORKLOAD, kind, str(args.pairs)],
            stdout=subprocess.PIPE,
        )
        assert workload.stdout is not None
        if workload.stdout.readline() != b"ready\n":
            raise SystemExit("the workload did not start")
        assert host.probes is not None
        pid = host.probes.pid
        tids = _tids(pid)
        cpu0 = _cpu_seconds(pid)
        recorded = subprocess.run(
            [
                sys.executable,
                "-m",
                "perfetto_cmd",
                "-c",
                f"{directory}/config.pb",
                "-o",
                f"{directory}/trace.pftrace",
            ],
            env=host.env,
            capture_output=True,
            text=True,
            check=False,
        )
        cpu1 = _cpu_seconds(pid)
        threads_exited = not tids <= _tids(pid)
        if recorded.returncode != 0:
            raise SystemExit(f"perfetto failed: {recorded.stderr.strip()}")
    finally:
        if workload is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(workload.pid, signal.SIGKILL)
            workload.wait()
            if workload.stdout is not None:
                workload.stdout.close()
        host.stop()
    events, overrun, lost_bundles = count(f"{directory}/trace.pftrace")
    return Session(events, cpu1 - cpu0, overrun, lost_bundles, threads_exited)


def count(path: str) -> tuple[int, int, int]:
    """(ftrace events, kernel overruns during the session, bundles flagged lost_events)."""
    trace = Trace()
    with open(path, "rb") as f:
        trace.ParseFromString(f.read())
    events = 0
    lost_bundles = 0
    overrun: dict[int, dict[int, int]] = {}
    for packet in trace.packet:
        if packet.HasField("ftrace_events"):
            bundle = packet.ftrace_events
            compact = bundle.compact_sched
            events += (
                len(bundle.event) + len(compact.switch_timestamp) + len(compact.waking_timestamp)
            )
            lost_bundles += bundle.lost_events
        if packet.HasField("ftrace_stats"):
            stats = packet.ftrace_stats
            overrun[stats.phase] = {cpu.cpu: cpu.overrun for cpu in stats.cpu_stats}
    start = overrun.get(FtraceStats.START_OF_TRACE, {})
    end = overrun.get(FtraceStats.END_OF_TRACE)
    if end is None:
        raise SystemExit(f"{path}: no END_OF_TRACE FtraceStats")
    return events, sum(n - start.get(cpu, 0) for cpu, n in end.items()), lost_bundles


# The table --------------------------------------------------------------------------------


def _medians(results: dict[str, list[Session]], attribute: str) -> dict[str, float]:
    """Each traced_probes' median of `attribute` over its sessions."""
    return {
        name: statistics.median(float(getattr(s, attribute)) for s in sessions)
        for name, sessions in results.items()
    }


def _sessions(
    probes: dict[str, list[str]], kind: str, config: TraceConfig, args: argparse.Namespace
) -> dict[str, list[Session]]:
    """`args.runs` sessions of each traced_probes, interleaved."""
    results: dict[str, list[Session]] = {name: [] for name in probes}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.runs):
            for name, command in probes.items():
                results[name].append(run_session(command, kind, config, args, tmp))
    for name, sessions in results.items():
        if any(s.threads_exited for s in sessions):
            print(f"  note: a thread of {name}'s traced_probes exited during a session: its CPU is")
            print("  missing from the sum (schedstat of live threads)")
    return results


def _print_row(label: str, values: dict[str, float], unit: str, goal: str) -> None:
    cells = "".join(f"{values[name]:>14.3f}" for name in values)
    ratio = ""
    if "upstream" in values:
        ours, upstream = values["ours"], values["upstream"]
        ratio = f"{ours / upstream:>8.2f}x" if upstream else f"{'-':>9}"
    print(f"  {label:<36}{cells}{ratio}  {unit:<6} {goal}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--upstream-traced-probes", default=os.environ.get("PERFETTO_UPSTREAM_TRACED_PROBES")
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=4.0, help="of recording per session")
    parser.add_argument("--pairs", type=int, default=2, help="ping-pong pairs (and fork loops)")
    parser.add_argument("--storm-buffer-kb", type=int, default=512)
    args = parser.parse_args()
    try:
        find_tracefs()
    except ProbesError as exc:
        print(f"bench_vs_upstream_probes: no tracefs, nothing measured: {exc}")
        return
    probes = {"ours": [sys.executable, "-m", "perfetto_service.traced_probes"]}
    if args.upstream_traced_probes:
        probes["upstream"] = [args.upstream_traced_probes]
    else:
        print(
            "upstream's traced_probes is absent (set PERFETTO_UPSTREAM_TRACED_PROBES or"
            " --upstream-traced-probes): measuring ours alone"
        )
    build = "pure Python" if _native.pure_requested() else "compiled"
    print(
        f"our traced_probes: {build}; our traced and perfetto for both; {args.seconds:g} s per"
        f" session, {args.pairs} ping-pong pairs, {args.runs} runs (median)"
    )
    header = "".join(f"{name:>14}" for name in probes)
    ratio = f"{'ratio':>9}" if "upstream" in probes else ""
    print(f"  {'':<36}{header}{ratio}  {'unit':<6} goal")

    sched = _sessions(probes, "sched", _config(SCHED_EVENTS, 4096, args.seconds), args)
    _print_row("sched: events arrived", _medians(sched, "events"), "", "")
    _print_row("sched: traced_probes CPU", _medians(sched, "cpu"), "s", "")
    per_event = {
        name: statistics.median(s.cpu / s.events * 1e6 if s.events else 0.0 for s in sessions)
        for name, sessions in sched.items()
    }
    _print_row("sched: CPU per event", per_event, "us", "ours <= 1.5x upstream's")
    _print_row("sched: overrun", _medians(sched, "overrun"), "", "")

    storm_config = _config(STORM_EVENTS, args.storm_buffer_kb, args.seconds)
    storm = _sessions(probes, "storm", storm_config, args)
    label = f"storm ({args.storm_buffer_kb} KB/CPU):"
    _print_row(f"{label} events", _medians(storm, "events"), "", "")
    _print_row(f"{label} traced_probes CPU", _medians(storm, "cpu"), "s", "")
    _print_row(f"{label} overrun", _medians(storm, "overrun"), "", "ours <= upstream's")
    _print_row(f"{label} lost_events", _medians(storm, "lost_bundles"), "bundle", "")
    lost = {
        name: statistics.median(s.overrun / max(s.overrun + s.events, 1) * 100 for s in sessions)
        for name, sessions in storm.items()
    }
    _print_row(f"{label} lost share", lost, "%", "ours <= upstream's")
    for kind, results in (("sched", sched), ("storm", storm)):
        for name, sessions in results.items():
            print(
                f"  {kind} runs, {name}: events {[s.events for s in sessions]}, CPU"
                f" {[round(s.cpu, 3) for s in sessions]}, overrun {[s.overrun for s in sessions]}"
            )


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == WORKLOAD:
        workload_main(sys.argv[2], int(sys.argv[3]))
    else:
        main()
