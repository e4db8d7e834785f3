"""`perfetto-trace run --sched`: the program's calls and its threads' scheduling in one trace,
read with upstream's schema (real tracefs; skipped with the reason where it cannot be used)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from perfetto_client._tracer._sched import SchedRecorder
from perfetto_client._tracer._sink import FileSink
from perfetto_probes import ProbesError
from perfetto_probes.ftrace._tracefs import find_tracefs
from perfetto_protos.upstream import parse_upstream_trace
from tracer_support import BIN, Slice, decode, end, require_compiled_hook, sigint_reaches_children

NOBODY = 65534
START_OF_TRACE, END_OF_TRACE = 1, 2  # FtraceStats.Phase
SLEEP_NS = 200_000_000
# The kernel's boot clock and the tracer's may differ by microseconds (two reads).
CLOCK_SLACK_NS = 1_000_000
_SUMMARY = re.compile(
    r"^perfetto-trace: scheduling: ([\d,]+) ftrace events from (\d+) CPUs "
    r"\(every thread of the machine\), (.*)$",
    re.M,
)

PROGRAM = """\
import sys, threading, time

def spin(n):
    total = 0
    for i in range(n):
        total += i
    return total

def nap():
    time.sleep(0.2)

def work():
    for _ in range(20):
        spin(20_000)
        time.sleep(0.001)

sleeper = threading.Thread(target=nap, name="sleeper")
worker = threading.Thread(target=work, name="worker")
sleeper.start(); worker.start()
sleeper.join(); worker.join()
print("done", sys.argv[1])
"""


def _tracefs_or_skip() -> Path:
    """The tracefs root, as the probes tests find it (mounted if need be); else a skip with
    the reason."""
    if not os.environ.get("PERFETTO_PY_PURE"):
        require_compiled_hook()  # the build under test is the one that runs
    try:
        return find_tracefs()
    except ProbesError as exc:
        pytest.skip(f"no tracefs: {exc}")


def _left_instances(root: Path, pid: int) -> list[str]:
    return [p.name for p in (root / "instances").glob(f"perfetto_py_{pid}_*")]


def _compact(trace: Any, times: str, pids: str) -> Iterator[tuple[int, int, int]]:
    """(cpu, timestamp, pid) of each event of compact_sched's columns `times` (deltas) and
    `pids`, bundle by bundle."""
    for packet in trace.packet:
        if not packet.HasField("ftrace_events"):
            continue
        bundle = packet.ftrace_events
        compact = bundle.compact_sched
        ts = 0
        for delta, pid in zip(getattr(compact, times), getattr(compact, pids), strict=True):
            ts += delta
            yield bundle.cpu, ts, pid


def _runs(trace: Any, tid: int) -> list[tuple[int, int]]:
    """The [switched in, switched out) intervals of thread `tid` on every CPU, in time order.

    compact_sched names only the next thread of a switch: the one switched out is the one the
    previous switch on that CPU switched in."""
    running: dict[int, tuple[int, int]] = {}  # cpu -> (pid, since)
    runs = []
    for cpu, ts, pid in _compact(trace, "switch_timestamp", "switch_next_pid"):
        previous = running.get(cpu)
        if previous is not None and previous[0] == tid:
            runs.append((previous[1], ts))
        running[cpu] = (pid, ts)
    return sorted(runs)


def _assert_blocked(trace: Any, tid: int, nap: Slice, duration_ns: int) -> None:
    """Thread `tid` blocked in the time.sleep `nap` of `duration_ns`: the kernel woke it that
    long after the call began, before the call returned, and it was off the CPU for a good
    part of that time before the waking (its last run before the waking ended at least a
    quarter of the sleep earlier). time.sleep sleeps to a deadline taken as it starts, so a
    thread that waits for a CPU at the start of the call runs again, briefly, before it
    blocks. (The gap is read from the waking: on an idle CPU this VM's kernel may log no
    switch from the idle task; and a thread that then waits for the GIL is woken again: the
    first waking counts.)"""
    woken = min(
        t
        for t in _wakings(trace, tid)
        if nap.ts + duration_ns - CLOCK_SLACK_NS <= t <= nap.ts + nap.dur
    )
    before = [run for run in _runs(trace, tid) if run[0] < woken]
    if before:
        last_out = max(out for _, out in before)
        assert woken - last_out >= duration_ns // 4, (nap, woken, before[-3:])


def _wakings(trace: Any, tid: int) -> list[int]:
    return [ts for _, ts, pid in _compact(trace, "waking_timestamp", "waking_pid") if pid == tid]


def _scheduled(trace: Any, tid: int) -> list[int]:
    """The times the scheduling names thread `tid`: switched in, woken or created."""
    switched_in = [
        ts for _, ts, pid in _compact(trace, "switch_timestamp", "switch_next_pid") if pid == tid
    ]
    created = [
        event.timestamp
        for packet in trace.packet
        if packet.HasField("ftrace_events")
        for event in packet.ftrace_events.event
        if event.HasField("task_newtask") and event.task_newtask.pid == tid
    ]
    return sorted(switched_in + _wakings(trace, tid) + created)


def _thread_names(trace: Any, pid: int) -> dict[int, str]:
    return {
        t.tid: t.name
        for packet in trace.packet
        if packet.HasField("process_tree")
        for t in packet.process_tree.threads
        if t.tgid == pid
    }


def _expected_lost(trace: Any) -> str:
    """What the summary says is lost, from the trace's FtraceStats: what the kernel overwrote
    (another process's switch storm may overflow the buffers: ftrace records every CPU)."""
    [start] = [p.ftrace_stats for p in trace.packet if p.ftrace_stats.phase == START_OF_TRACE]
    [end_] = [p.ftrace_stats for p in trace.packet if p.ftrace_stats.phase == END_OF_TRACE]

    def overwritten(stats: Any) -> int:
        return sum(c.overrun + c.commit_overrun + c.dropped_events for c in stats.cpu_stats)

    lost = overwritten(end_) - overwritten(start)
    if not lost:
        return "0 lost"
    return (
        f"{lost:,} lost ({lost:,} overwritten in the kernel's ring buffers before they were read)"
    )


def _all_slices(slices: list[Slice]) -> Iterator[Slice]:
    for s in slices:
        yield s
        yield from _all_slices(s.children)


def _run_prog(tmp_path: Path) -> tuple[subprocess.Popen[str], str]:
    """`perfetto-trace run --sched -o out.pftrace prog.py` in `tmp_path`, to its end; the
    process and its stderr."""
    command = [str(BIN / "perfetto-trace"), "run", "--sched", "-o", "out.pftrace", "prog.py"]
    with subprocess.Popen(
        command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as proc:
        try:
            _, stderr = proc.communicate(timeout=120)
        finally:
            end(proc)
    return proc, stderr


def _run_sched(
    tmp_path: Path, *args: str, cwd: Path | None = None
) -> tuple[subprocess.CompletedProcess[str], Path, int]:
    """The user's command line, from another directory: `perfetto-trace run --sched -o OUT
    prog.py ARG`; returns the run, the trace and the program's pid."""
    src = tmp_path / "src"
    src.mkdir(exist_ok=True)
    (src / "prog.py").write_text(PROGRAM)
    elsewhere = cwd or tmp_path / "elsewhere"
    elsewhere.mkdir(exist_ok=True)
    command = [str(BIN / "perfetto-trace"), "run", "--sched", "-o", "out.pftrace"]
    with subprocess.Popen(
        [*command, *args, "../src/prog.py", "ARG"],
        cwd=elsewhere,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=120)
        finally:
            end(proc)
    return (
        subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr),
        (elsewhere / "out.pftrace"),
        proc.pid,
    )


def test_the_calls_and_the_scheduling_of_every_thread_share_one_timeline(tmp_path: Path) -> None:
    root = _tracefs_or_skip()
    proc, out, pid = _run_sched(tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "done ARG\n"
    assert not _left_instances(root, pid)
    [(events, cpus, lost)] = _SUMMARY.findall(proc.stderr)
    assert int(events.replace(",", "")) > 0
    assert int(cpus) == os.cpu_count()

    trace: Any = parse_upstream_trace(out.read_bytes())
    assert lost == _expected_lost(trace)
    decoded = decode(out)
    assert decoded.problems == []
    [sleeper] = decoded.by_name("sleeper")
    [worker] = decoded.by_name("worker")
    [main] = decoded.by_name("MainThread")
    assert sleeper.pid == worker.pid == main.pid == pid
    slices = [s for t in (sleeper, worker, main) for s in _all_slices(t.slices)]
    span = (min(s.ts for s in slices), max(s.ts + s.dur for s in slices))

    # The scheduling names each thread within the program's run as its calls show it: switched
    # in, woken or created. (A switch in from the idle task may be missing on this VM's
    # kernel, so a thread that ran once, from idle, may show only its creation.)
    for thread in (sleeper, worker, main):
        seen = _scheduled(trace, thread.tid)
        assert [t for t in seen if span[0] <= t <= span[1]], (thread.name, seen[:5], span)

    # The sleeper blocks in its time.sleep(0.2), inside that call.
    [nap] = [s for s in sleeper.slices if s.name == "time.sleep"]
    _assert_blocked(trace, sleeper.tid, nap, SLEEP_NS)

    # The process tree names the program's threads by their threading names.
    names = _thread_names(trace, pid)
    assert names[sleeper.tid] == "sleeper"
    assert names[worker.tid] == "worker"
    assert names[pid] == "MainThread"


def test_ctrl_c_mid_run_still_writes_the_scheduling(tmp_path: Path) -> None:
    root = _tracefs_or_skip()
    (tmp_path / "prog.py").write_text(
        "import time\n"
        "def tick():\n"
        "    time.sleep(0.01)\n"
        "tick()\n"
        "print('ready', flush=True)\n"
        "while True:\n"
        "    tick()\n"
    )
    command = [str(BIN / "perfetto-trace"), "run", "--sched", "-o", "out.pftrace", "prog.py"]
    with sigint_reaches_children():
        proc = subprocess.Popen(
            command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "ready\n"  # tick() has run: it slept, off the CPU
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
    finally:
        end(proc)
    assert proc.returncode == -signal.SIGINT
    assert "KeyboardInterrupt" in stderr
    assert not _left_instances(root, proc.pid)
    [(events, _, lost)] = _SUMMARY.findall(stderr)
    assert int(events.replace(",", "")) > 0
    trace: Any = parse_upstream_trace((tmp_path / "out.pftrace").read_bytes())
    assert lost == _expected_lost(trace)
    [main] = decode(tmp_path / "out.pftrace").by_name("MainThread")
    assert "tick" in main.names()
    assert len(_scheduled(trace, main.tid)) >= 2  # each tick's sleep ends in a waking
    phases = [p.ftrace_stats.phase for p in trace.packet if p.HasField("ftrace_stats")]
    assert phases == [START_OF_TRACE, END_OF_TRACE]


@pytest.mark.parametrize(
    ("ending", "status"), [("sys.exit(3)", 3), ("raise ValueError('boom')", 1)]
)
def test_exit_and_an_exception_still_finish_the_scheduling(
    tmp_path: Path, ending: str, status: int
) -> None:
    root = _tracefs_or_skip()
    (tmp_path / "prog.py").write_text(f"import sys, time\ntime.sleep(0.01)\n{ending}\n")
    proc, stderr = _run_prog(tmp_path)
    assert proc.returncode == status, stderr
    assert not _left_instances(root, proc.pid)
    [(_, _, lost)] = _SUMMARY.findall(stderr)
    trace: Any = parse_upstream_trace((tmp_path / "out.pftrace").read_bytes())
    phases = [p.ftrace_stats.phase for p in trace.packet if p.HasField("ftrace_stats")]
    assert phases == [START_OF_TRACE, END_OF_TRACE]
    assert lost == _expected_lost(trace)
    [main] = decode(tmp_path / "out.pftrace").by_name("MainThread")
    assert _scheduled(trace, main.tid)


def test_without_access_to_tracefs_one_line_and_the_calls_are_recorded() -> None:
    root = _tracefs_or_skip()
    if os.geteuid() != 0:
        pytest.skip("needs root, to run perfetto-trace as another user")
    if root.stat().st_mode & 0o005:
        pytest.skip(f"{root} is open to every user here")
    work = Path(tempfile.mkdtemp(prefix="perfetto-sched-"))
    try:
        os.chmod(work, 0o777)
        (work / "prog.py").write_text(PROGRAM)
        (work / "prog.py").chmod(0o644)
        plain = subprocess.run(
            [sys.executable, "prog.py", "ARG"],
            cwd=work,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        status, stdout, stderr = _run_as_nobody(work)
        assert status == plain.returncode == 0, stderr
        assert stdout == plain.stdout == "done ARG\n"
        reason = f"{root}: permission denied (tracefs needs root or access to it)"
        own = [line for line in stderr.splitlines() if line.startswith("perfetto-trace: ")]
        assert own[0] == (
            f"perfetto-trace: --sched: {reason}; the program runs, its scheduling is not recorded"
        )
        assert f"perfetto-trace: scheduling was not recorded: {reason}" in own
        assert "Traceback" not in stderr
        assert (work / "out.pftrace").stat().st_uid == NOBODY
        [sleeper] = decode(work / "out.pftrace").by_name("sleeper")
        assert "nap" in sleeper.names()
        trace: Any = parse_upstream_trace((work / "out.pftrace").read_bytes())
        kinds = {p.WhichOneof("data") for p in trace.packet}
        assert not kinds & {"ftrace_events", "ftrace_stats", "process_tree"}
    finally:
        shutil.rmtree(work)


def _run_as_nobody(work: Path) -> tuple[int, str, str]:
    """`perfetto-trace run --sched -o out.pftrace prog.py ARG` in `work`, in a forked child
    that became uid 65534: its exit status, stdout and stderr."""
    # Loaded before the uid changes: another user may not read this interpreter's files.
    from perfetto_client._tracer import _cli, _sched  # noqa: F401
    from perfetto_client._tracer._engine import hook_module

    hook_module()
    stdout, stderr = work / "stdout", work / "stderr"
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child)
        code = 70
        try:
            for fd, path in ((1, stdout), (2, stderr)):
                os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), fd)
            sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
            sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
            os.chdir(work)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            code = _cli.main(["run", "--sched", "-o", "out.pftrace", "prog.py", "ARG"])
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), stdout.read_text(), stderr.read_text()


def _ping_pong(rounds: int) -> None:
    """Two threads that wake each other through pipes `rounds` times: a switch storm."""
    there, here = os.pipe(), os.pipe()

    def echo() -> None:
        for _ in range(rounds):
            os.write(here[1], os.read(there[0], 1))

    thread = threading.Thread(target=echo)
    thread.start()
    try:
        for _ in range(rounds):
            os.write(there[1], b"x")
            os.read(here[0], 1)
    finally:
        thread.join()
        for fd in (*there, *here):
            os.close(fd)


def test_events_the_kernel_overwrote_are_counted_lost_with_the_reason(tmp_path: Path) -> None:
    root = _tracefs_or_skip()
    sink = FileSink(str(tmp_path / "t.pftrace"), b"")
    write_errors: list[OSError] = []
    sched = SchedRecorder(sink, 1 << 14, lambda tid: None, write_errors.append)
    sched.ftrace.config.buffer_size_kb = 8  # a page or two a CPU
    sched.ftrace.drain_period_ns = 3600 * 10**9  # read once at the start, then at the end
    sched.start()
    try:
        _ping_pong(20_000)
    finally:
        sched.stop()
        sink.close()
    assert not _left_instances(root, os.getpid())
    assert write_errors == []
    trace: Any = parse_upstream_trace((tmp_path / "t.pftrace").read_bytes())
    [end_stats] = [p.ftrace_stats for p in trace.packet if p.ftrace_stats.phase == END_OF_TRACE]
    overwritten = sum(
        cpu.overrun + cpu.commit_overrun + cpu.dropped_events for cpu in end_stats.cpu_stats
    )
    assert overwritten > 0
    line = sched.summary()
    assert line.endswith(
        f"{overwritten:,} lost ({overwritten:,} overwritten in the kernel's ring buffers "
        "before they were read)"
    )


def test_scheduling_the_size_cap_left_out_is_counted_lost(tmp_path: Path) -> None:
    root = _tracefs_or_skip()
    proc, out, pid = _run_sched(tmp_path, "--max-size", "0.001")
    assert proc.returncode == 0, proc.stderr
    assert not _left_instances(root, pid)
    [(events, _, lost)] = _SUMMARY.findall(proc.stderr)
    read = int(events.replace(",", ""))
    assert read > 0
    # Every event read is in the file or in a batch the cap left out (the first small batch
    # may fit under the cap); a storm elsewhere on the machine may have overflowed the
    # kernel's buffers meanwhile: counted beside them.
    match = re.fullmatch(
        r"([\d,]+) lost \((?:([\d,]+) overwritten in the kernel's ring buffers before they "
        r"were read; )?([\d,]+) not written to the trace file\)",
        lost,
    )
    assert match is not None, lost
    total, overwritten, not_written = (int((g or "0").replace(",", "")) for g in match.groups())
    assert total == overwritten + not_written
    trace: Any = parse_upstream_trace(out.read_bytes())
    bundles = [p.ftrace_events for p in trace.packet if p.HasField("ftrace_events")]
    in_file = sum(
        len(b.event) + len(b.compact_sched.switch_timestamp) + len(b.compact_sched.waking_timestamp)
        for b in bundles
    )
    assert not_written > 0
    assert in_file + not_written == read


def test_a_forked_child_leaves_the_parents_scheduling_alone(tmp_path: Path) -> None:
    root = _tracefs_or_skip()
    (tmp_path / "prog.py").write_text(
        "import os, sys, time\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    sys.exit(0)\n"
        "os.waitpid(pid, 0)\n"
        "time.sleep(0.3)\n"
    )
    proc, stderr = _run_prog(tmp_path)
    assert proc.returncode == 0, stderr
    assert not _left_instances(root, proc.pid)
    [(_, _, lost)] = _SUMMARY.findall(stderr)  # the parent's: the child's has no such line
    trace: Any = parse_upstream_trace((tmp_path / "out.pftrace").read_bytes())
    phases = [p.ftrace_stats.phase for p in trace.packet if p.HasField("ftrace_stats")]
    assert phases == [START_OF_TRACE, END_OF_TRACE]
    assert lost == _expected_lost(trace)
    # Still recording after the child ended: the parent's sleep is there, off the CPU.
    threads = decode(tmp_path / "out.pftrace").by_name("MainThread")
    [parent] = [t for t in threads if t.tid == proc.pid]
    [nap] = [s for s in parent.slices if s.name == "time.sleep" and s.dur >= 300_000_000]
    _assert_blocked(trace, proc.pid, nap, 300_000_000)
