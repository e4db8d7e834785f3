"""perfetto-trace --system: the calls land in a session of a running traced."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from perfetto_client import Backend, Tracing
from perfetto_client._tracer._engine import hook_module
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
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "200\n"
    assert proc.stderr == (
        f"perfetto-trace: no tracing service at {tmp_path / 'nobody'}: "
        "the program runs, nothing is recorded\n"
    )
    assert not out.exists()
