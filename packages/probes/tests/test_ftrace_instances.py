"""linux.ftrace's tracefs instances: its own per data source, removed at stop and after a
crash; and one clear line where tracefs cannot be used."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from ftrace_testlib import (
    SCHED_EVENTS,
    PingPong,
    ftrace_config,
    read_packet,
    switches,
    tracefs_or_skip,
)
from perfetto_probes import ProbesError
from perfetto_probes.ftrace import FtraceDataSource, _tracefs
from perfetto_testing import end_process, wait_for

HERE = Path(__file__).resolve().parent
NOBODY = 65534


def _ours(root: Path) -> set[str]:
    """This process's default instances (other test processes make and remove theirs)."""
    mine = f"perfetto_py_{os.getpid()}_"
    return {n for n in os.listdir(root / "instances") if n.startswith(mine)}


def test_the_instance_is_removed_at_stop() -> None:
    root = tracefs_or_skip()
    before = _ours(root)
    source = FtraceDataSource(ftrace_config(ftrace_events=SCHED_EVENTS), lambda _: None)
    source.start()
    during = _ours(root) - before
    source.stop()
    assert len(during) == 1
    assert _ours(root) == before


def test_a_named_instance_is_used_and_removed() -> None:
    root = tracefs_or_skip()
    name = f"perfetto_py_named_{os.getpid()}"
    config = ftrace_config(ftrace_events=SCHED_EVENTS, instance_name=name)
    source = FtraceDataSource(config, lambda _: None)
    source.start()
    assert (root / "instances" / name / "tracing_on").read_text().strip() == "1"
    assert (root / "instances" / name / "trace_clock").read_text().count("[boot]") == 1
    source.stop()
    assert not (root / "instances" / name).exists()


def test_two_sessions_at_once_each_record_all_their_switches() -> None:
    tracefs_or_skip()
    first: list[bytes] = []
    second: list[bytes] = []
    a = FtraceDataSource(ftrace_config(ftrace_events=SCHED_EVENTS), first.append)
    b = FtraceDataSource(ftrace_config(ftrace_events=SCHED_EVENTS), second.append)
    a.start()
    try:
        b.start()
        workload = PingPong(100)
        try:
            workload.run()
        finally:
            b.stop()
    finally:
        a.stop()
    tid = workload.tids["ppA"]
    seen = []
    for packets in (first, second):
        # Every switch out of a thread is in the kernel's trace, not every switch in from the
        # idle task (test_two_threads_switching_show_on_each_cpu_with_their_tids_and_comms).
        outs = [s for s in switches([read_packet(p) for p in packets]) if s[2] == tid]
        assert len(outs) >= 100
        # Each instance stamps its own copy of an event: the times differ by a few hundred ns.
        seen.append(
            [(cpu, prev, next_) for cpu, _, prev, _, next_, _ in sorted(outs, key=lambda s: s[1])]
        )
    # The second session ran inside the first: the first holds all its switches, in order (the
    # thread's exit after the join may switch it out once more, seen only by the first).
    inner = seen[1]
    assert any(seen[0][i : i + len(inner)] == inner for i in range(len(seen[0]) - len(inner) + 1))


_CRASHING = textwrap.dedent(
    """
    import os, sys
    sys.path.insert(0, sys.argv[1])
    from ftrace_testlib import ftrace_config
    from perfetto_probes.ftrace import FtraceDataSource
    source = FtraceDataSource(ftrace_config(ftrace_events=["sched/sched_switch"]), lambda _: None)
    source.start()
    print(source.instance.path.name, flush=True)
    sys.stdin.read()
    """
)


def test_an_instance_left_by_a_crash_is_removed_at_the_next_start() -> None:
    root = tracefs_or_skip()
    child = subprocess.Popen(
        [sys.executable, "-c", _CRASHING, str(HERE)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        left = child.stdout.readline().strip()
        assert left.startswith("perfetto_py_")
    finally:
        end_process(child, 9)
        for pipe in (child.stdin, child.stdout):
            if pipe is not None:
                pipe.close()
    assert (root / "instances" / left).is_dir()
    assert (root / "instances" / left / "tracing_on").read_text().strip() == "1"
    source = FtraceDataSource(ftrace_config(ftrace_events=SCHED_EVENTS), lambda _: None)
    source.start()
    try:
        # Removed by this start, or by another test process's start at the same moment.
        wait_for(lambda: not (root / "instances" / left).exists(), what=f"{left} removed")
    finally:
        source.stop()


def test_without_tracefs_the_start_fails_in_one_line_naming_the_path(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    missing = tmp_path / "sys/kernel/tracing"
    monkeypatch.setattr(_tracefs, "_ROOTS", (missing, tmp_path / "debug/tracing"))
    source = FtraceDataSource(ftrace_config(ftrace_events=SCHED_EVENTS), lambda _: None)
    with pytest.raises(ProbesError) as error:
        source.start()
    assert str(error.value) == f"{missing}: no such directory (this kernel has no tracefs)"


def test_where_tracefs_cannot_be_mounted_the_reason_is_given(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    target = tmp_path / "tracing"
    target.mkdir()
    monkeypatch.setattr(_tracefs, "_ROOTS", (target,))
    monkeypatch.setattr(_tracefs, "_mount", lambda path: "Operation not permitted")
    with pytest.raises(
        ProbesError, match=rf"^{target}: cannot mount tracefs: Operation not permitted$"
    ):
        _tracefs.find_tracefs()


def test_tracefs_is_mounted_where_it_is_not(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    if os.geteuid() != 0:
        pytest.skip("mounting tracefs needs root")
    target = tmp_path / "tracing"
    target.mkdir()
    monkeypatch.setattr(_tracefs, "_ROOTS", (target,))
    libc = ctypes.CDLL(None, use_errno=True)
    try:
        root = _tracefs.find_tracefs()
    except ProbesError as exc:
        pytest.skip(f"tracefs cannot be mounted here: {exc}")
    try:
        assert root == target
        assert (target / "events/sched/sched_switch/format").is_file()
    finally:
        assert libc.umount2(str(target).encode(), 0) == 0, os.strerror(ctypes.get_errno())


def _start_as_nobody() -> str:
    """What starting linux.ftrace says in a child that became uid/gid 65534 first."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child)
        try:
            os.close(read_fd)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            try:
                FtraceDataSource(ftrace_config(ftrace_events=SCHED_EVENTS), print).start()
                message = "started"
            except ProbesError as exc:
                message = str(exc)
            os.write(write_fd, message.encode())
        finally:
            os._exit(0)
    os.close(write_fd)
    try:
        with os.fdopen(read_fd, "rb") as out:
            return out.read().decode()
    finally:
        os.waitpid(pid, 0)


def test_a_user_without_access_gets_one_line_naming_the_path() -> None:
    root = tracefs_or_skip()
    if os.geteuid() != 0:
        pytest.skip("needs root, to run the child as another user")
    if root.stat().st_mode & 0o005:
        pytest.skip(f"{root} is open to every user here")
    message = _start_as_nobody()
    assert message == f"{root}: permission denied (tracefs needs root or access to it)"
