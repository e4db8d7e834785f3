"""Recording from Python: `record(...)` as a context manager and as a decorator."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest
from perfetto_client import TracingError
from perfetto_client._tracer import record
from tracer_support import decode


def fib(n: int) -> int:
    return n if n < 2 else fib(n - 1) + fib(n - 2)


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
    (tmp_path / "p.py").write_text(program)
    proc = subprocess.run(
        [sys.executable, "p.py"],
        check=False,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == ["perfetto_service: after the block"]
    assert decode(tmp_path / "t.pftrace").problems == []
