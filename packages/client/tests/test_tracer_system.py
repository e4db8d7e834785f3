"""perfetto-trace --system: the calls land in a session of a running traced."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from perfetto_client import Backend, Tracing
from perfetto_client._tracer._engine import hook_module
from perfetto_protos.upstream import parse_upstream_trace
from protozero import encode_varint
from test_system_backend import Traced
from tracer_support import HOOKS, decode, require_compiled_hook, run_traced

PROGRAM = """
import threading
def leaf(i):
    return i * 2
def middle(i):
    return leaf(i) + leaf(i + 1)
def work(n):
    return sum(middle(i) for i in range(n))
t = threading.Thread(target=work, args=(5,), name="helper")
t.start()
t.join()
print(work(10))
"""


@pytest.fixture
def traced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Traced]:
    daemon = Traced(tmp_path)
    monkeypatch.setenv("PERFETTO_PRODUCER_SOCK_NAME", daemon.env["PERFETTO_PRODUCER_SOCK_NAME"])
    monkeypatch.setenv("PERFETTO_CONSUMER_SOCK_NAME", daemon.env["PERFETTO_CONSUMER_SOCK_NAME"])
    daemon.start()
    yield daemon
    daemon.kill()


@pytest.mark.parametrize("hook", HOOKS)
def test_batches_split_into_packets_of_any_size(hook: str) -> None:
    if hook == "compiled":
        require_compiled_hook()
    packets = [b"\x08\x01", bytes(range(256)) * 2, b""]  # sizes of 1, 2 and 1 bytes
    batch = b"".join(b"\x0a" + encode_varint(len(packet)) + packet for packet in packets)
    assert hook_module(pure=hook == "pure").split_packets(batch) == packets


@pytest.mark.parametrize("hook", HOOKS)
def test_calls_land_in_a_system_session(tmp_path: Path, traced: Traced, hook: str) -> None:
    session = Tracing.new_trace(Backend.SYSTEM)
    session.setup({"data_sources": [{"config": {"name": "track_event"}}]})
    session.start()
    try:
        proc, out = run_traced(tmp_path, PROGRAM, options=("--system",), pure=hook == "pure")
    finally:
        session.stop()
    data = session.read_trace()
    session.close()
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "200\n"
    assert not out.exists()
    assert "to traced at " in proc.stderr
    assert ", 0 lost," in proc.stderr, proc.stderr
    trace_file = tmp_path / "session.pftrace"
    trace_file.write_bytes(data)
    trace = decode(trace_file)
    assert trace.problems == []
    [main] = trace.by_name("MainThread")
    [helper] = trace.by_name("helper")
    for thread, calls in ((main, 10), (helper, 5)):
        works = [s for s in thread.slices if s.name == "work"]
        assert len(works) == 1
        middles = [s for s in thread.slices if s.name == "middle"]
        assert len(middles) == calls
        for m in middles:
            assert [c.name for c in m.children] == ["leaf", "leaf"]
    assert main.pid == helper.pid
    assert "prog.py" in trace.processes.values()


def test_without_traced_the_program_runs_and_one_line_says_so(tmp_path: Path) -> None:
    env = {"PERFETTO_PRODUCER_SOCK_NAME": str(tmp_path / "nobody")}
    proc, out = run_traced(tmp_path, PROGRAM, options=("--system", "-q"), env=env)
    _ran_saying_no_service(proc, tmp_path / "nobody")
    assert proc.stdout == "200\n"
    assert not out.exists()


def _ran_saying_no_service(proc: subprocess.CompletedProcess[str], socket: Path) -> None:
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == (
        f"perfetto-trace: no tracing service at {socket}: the program runs, nothing is recorded\n"
    )


LOOKS_AROUND = """
import threading
from perfetto_client import Tracing
print(Tracing.is_initialized(), [t.name for t in threading.enumerate() if "perfetto" in t.name])
"""


def test_without_traced_nothing_of_the_system_backend_is_left_running(tmp_path: Path) -> None:
    env = {"PERFETTO_PRODUCER_SOCK_NAME": str(tmp_path / "nobody")}
    proc, _ = run_traced(tmp_path, LOOKS_AROUND, options=("--system", "-q"), env=env)
    _ran_saying_no_service(proc, tmp_path / "nobody")
    assert proc.stdout == "False []\n"


RECURSIVE = """
import threading
def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)
workers = [threading.Thread(target=fib, args=(16,), name=f"worker{i}") for i in range(5)]
for w in workers:
    w.start()
fib(25)
for w in workers:
    w.join()
"""


def _calls(n: int) -> int:
    return 1 if n < 2 else 1 + _calls(n - 1) + _calls(n - 2)


def _system_session(policy: str = "") -> Any:
    source: dict[str, Any] = {"name": "track_event"}
    if policy:
        source["buffer_exhausted_policy"] = policy
    session = Tracing.new_trace(Backend.SYSTEM)
    session.setup({"buffers": [{"size_kb": 65536}], "data_sources": [{"config": source}]})
    session.start()
    return session


@pytest.mark.parametrize("hook", HOOKS)
def test_every_call_of_a_recursive_program_and_its_threads_lands_in_traced(
    tmp_path: Path, traced: Traced, hook: str
) -> None:
    session = _system_session()
    try:
        proc, _ = run_traced(tmp_path, RECURSIVE, options=("--system",), pure=hook == "pure")
    finally:
        session.stop()
    data = session.read_trace(timeout=30)
    session.close()
    assert proc.returncode == 0, proc.stderr
    assert ", 0 lost," in proc.stderr, proc.stderr
    trace_file = tmp_path / "session.pftrace"
    trace_file.write_bytes(data)
    trace = decode(trace_file)
    assert trace.problems == []
    [main] = trace.by_name("MainThread")
    assert main.names().count("fib") == _calls(25)
    for i in range(5):
        [worker] = trace.by_name(f"worker{i}")
        assert worker.names().count("fib") == _calls(16)


WAITING = """
import sys
import perfetto_client
def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)
while not perfetto_client.is_enabled("perfetto_trace"):
    pass
print("recording", flush=True)
sys.stdin.readline()
fib(22)  # more than one batch (1 MiB): the first one fills the SMB while traced is held
print("done", flush=True)
sys.stdin.readline()
"""
SENT = re.compile(r"sent ([\d,]+) events .*?, (?:([\d,]+) lost \(([^)]*)\)|0 lost)")


def _run_waiting(
    tmp_path: Path, traced: Traced, policy: str, hold: bool
) -> tuple[int, int, str, Any]:
    """Runs WAITING under --system into a session of its own; with `hold`, `traced` is
    stopped (SIGSTOP) while the program works, then let drain before the program ends.

    Returns the summary's sent and lost counts, its reason and the session's trace (upstream's
    Trace message).
    """
    script = tmp_path / "waiting.py"
    script.write_text(WAITING)
    session = _system_session(policy)
    cmd = [
        sys.executable,
        "-m",
        "perfetto_client._tracer",
        "run",
        "--system",
        "--no-gc",
        str(script),
    ]
    proc = subprocess.Popen(
        cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert traced.daemon is not None
    try:
        assert proc.stdout is not None
        assert proc.stdin is not None
        assert proc.stdout.readline() == "recording\n"
        if hold:
            traced.daemon.process.send_signal(signal.SIGSTOP)
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert proc.stdout.readline() == "done\n"
        traced.daemon.process.send_signal(signal.SIGCONT)
        time.sleep(1)  # traced drains the SMB: the last batch gets a chunk, marked after a loss
        proc.stdin.write("end\n")
        proc.stdin.flush()
        _, err = proc.communicate(timeout=120)
    finally:
        traced.daemon.process.send_signal(signal.SIGCONT)
        proc.kill()
        proc.wait()
    session.stop()
    trace: Any = parse_upstream_trace(session.read_trace(timeout=30))
    session.close()
    assert proc.returncode == 0, err
    match = SENT.search(err)
    assert match is not None, err
    return (
        int(match[1].replace(",", "")),
        int((match[2] or "0").replace(",", "")),
        match[3] or "",
        trace,
    )


def test_events_lost_in_a_full_shared_memory_buffer_are_counted_in_the_summary(
    tmp_path: Path, traced: Traced
) -> None:
    total, lost, _, trace = _run_waiting(tmp_path, traced, "", hold=False)
    assert lost == 0
    assert _events(trace) == total
    sent, lost, reason, trace = _run_waiting(tmp_path, traced, "BUFFER_EXHAUSTED_DROP", hold=True)
    assert lost > 0
    assert reason == "traced's shared memory buffer was full"
    assert _events(trace) == sent == total - lost  # what is missing is what the summary says
    [stats] = [p.trace_stats for p in trace.packet if p.HasField("trace_stats")][-1:]
    assert stats.buffer_stats[0].trace_writer_packet_loss >= 1  # traced counted the loss too


def _events(trace: Any) -> int:
    return sum(p.HasField("track_event") for p in trace.packet)
