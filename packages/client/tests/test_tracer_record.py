"""Recording from Python: `record(...)` as a context manager and as a decorator."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from perfetto_client import TracingError
from perfetto_client._tracer import record
from tracer_support import decode, require_compiled_hook


def fib(n: int) -> int:
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def _run(tmp_path: Path, program: str) -> subprocess.CompletedProcess[str]:
    """Runs `program` as `python prog.py` in `tmp_path`, its output captured."""
    (tmp_path / "prog.py").write_text(program)
    return subprocess.run(
        [sys.executable, "prog.py"],
        check=False,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("pure", [False, True])
def test_with_record_writes_the_block(tmp_path: Path, pure: bool) -> None:
    out = tmp_path / "block.pftrace"
    with record(out, pure=pure) as rec:
        fib(6)
        worker = threading.Thread(target=fib, args=(4,), name="helper")
        worker.start()
        worker.join()
    fib(3)  # after the block: not recorded
    assert rec.summary is not None
    assert rec.summary.path == str(out)
    assert rec.summary.events_written > 0
    trace = decode(out)
    assert trace.problems == []
    [helper] = trace.by_name("helper")
    assert helper.names().count(f"{__name__}.fib") == 9
    mains = [t for t in trace.threads.values() if t.name != "helper"]
    assert sum(t.names().count(f"{__name__}.fib") for t in mains) == 25
    assert not [n for n in trace.all_names() if "perfetto_client" in n or "protozero" in n]


def test_decorator_records_each_call(tmp_path: Path) -> None:
    out = tmp_path / "call.pftrace"

    @record(out, c_calls=False)
    def job(n: int) -> int:
        return fib(n)

    assert job(5) == 5
    trace = decode(out)
    assert trace.problems == []
    [thread] = [t for t in trace.threads.values() if t.slices]
    [root] = thread.program_roots()
    assert root.name.endswith("test_decorator_records_each_call.<locals>.job")
    assert [c.name for c in root.children] == [f"{__name__}.fib"]


def test_one_recording_at_a_time(tmp_path: Path) -> None:
    with record(tmp_path / "a.pftrace"), pytest.raises(TracingError, match="already"):
        record(tmp_path / "b.pftrace").__enter__()


def test_unknown_option_is_a_tracing_error(tmp_path: Path) -> None:
    with pytest.raises(TracingError, match="colour"):
        record(tmp_path / "x.pftrace", colour="red")


def test_the_service_logger_is_given_back_after_the_block(tmp_path: Path) -> None:
    # During the block the in-process service's INFO lines stay out of the program's
    # logging; after it, the program's own use of that logger is as before.
    program = (
        "import logging\n"
        "import perfetto_client\n"
        "from perfetto_client._tracer import record\n"
        "logging.basicConfig(level=logging.INFO, format='%(name)s: %(message)s')\n"
        "with record('t.pftrace'):\n"
        "    perfetto_client.Tracing.initialize()\n"
        "    perfetto_client.instant('app', 'inside')\n"
        "logging.getLogger('perfetto_service').info('after the block')\n"
    )
    proc = _run(tmp_path, program)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == ["perfetto_service: after the block"]
    assert decode(tmp_path / "t.pftrace").problems == []


FORK_IN_BLOCK = """
import os, sys
import perfetto_client

def in_child():
    return 7

def in_parent():
    return 8

rec = perfetto_client.record("out.pftrace", follow_children={follow})
with rec:
    pid = os.fork()
    if pid == 0:
        in_child()
    else:
        _, status = os.waitpid(pid, 0)  # the child has left the block and ended
        in_parent()
if pid == 0:
    print("child summary", rec.summary, flush=True)
    {end}
print("child exit", os.waitstatus_to_exitcode(status))
print("parent summary", rec.summary.events_written, rec.summary.events_lost,
      rec.summary.processes, rec.summary.build)
"""


@pytest.mark.parametrize(("end", "status"), [("os._exit(0)", 0), ("sys.exit(3)", 3)])
@pytest.mark.parametrize("follow", [False, True])
def test_a_forked_child_leaving_the_block_leaves_the_parents_recording_alone(
    tmp_path: Path, end: str, status: int, follow: bool
) -> None:
    build = "pure" if os.environ.get("PERFETTO_PY_PURE") else "compiled"
    if build == "compiled":
        require_compiled_hook()
    proc = _run(tmp_path, FORK_IN_BLOCK.format(follow=follow, end=end))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    # The child's copy of the recording is its parent's: no summary of its own.
    child, exit_line, parent = proc.stdout.splitlines()
    assert child == "child summary None"
    assert exit_line == f"child exit {status}"
    events, lost, processes, used = parent.split()[2:]
    assert (int(lost), int(processes), used) == (0, 1 + follow, build)
    trace = decode(tmp_path / "out.pftrace")
    assert trace.problems == []
    decoded = sum(2 * len(t.slices) + len(t.instants) for t in trace.threads.values())
    assert decoded == int(events)
    [main] = [t for t in trace.threads.values() if "in_parent" in t.names()]
    children = [t for t in trace.threads.values() if "in_child" in t.names()]
    assert len(children) == follow
    assert all(t.pid != main.pid for t in children)
    assert "in_child" not in main.names()
    assert len(trace.processes) == 1 + follow
    assert not list(tmp_path.glob(".perfetto-trace-children-*"))


STOP_IN_CHILD = """
import os
from perfetto_client import TracingError
from perfetto_client._tracer._options import TraceOptions
from perfetto_client._tracer._recording import Recording

recording = Recording(TraceOptions(output="out.pftrace"))
recording.start()
pid = os.fork()
if pid == 0:
    try:
        recording.stop()
    except TracingError as exc:
        print(exc, recording.summary, flush=True)
    os._exit(0)
os.waitpid(pid, 0)
summary = recording.stop()
print(os.getpid(), summary.events_written)
"""


def test_stopping_the_recording_in_a_forked_child_is_a_tracing_error(tmp_path: Path) -> None:
    proc = _run(tmp_path, STOP_IN_CHILD)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    child, parent = proc.stdout.splitlines()
    pid, events = parent.split()
    assert child == (
        f"this recording belongs to process {pid}, which started it: "
        "a forked child cannot stop it None"
    )
    trace = decode(tmp_path / "out.pftrace")
    assert trace.problems == []
    assert int(events) > 0
    assert sum(2 * len(t.slices) + len(t.instants) for t in trace.threads.values()) == int(events)
