"""perfetto-trace while its writes are slow or fail: the program keeps its signals and its
exit status, and the summary says what reached the file."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from tracer_support import HOOKS, decode, require_compiled_hook

TRACE = [sys.executable, "-m", "perfetto_client._tracer", "run"]
BUSY = """
import signal
signal.signal(signal.SIGINT, signal.default_int_handler)  # even if the test runs without it
def work(i):
    return i
def after():
    return 0
print("ready", flush=True)
try:
    i = 0
    while True:
        work(i)
        i += 1
except KeyboardInterrupt:
    print("interrupted", flush=True)
after()
"""


def _blocked_writing(pid: int) -> bool:
    tasks = Path(f"/proc/{pid}/task")
    for task in tasks.iterdir():
        try:
            if "pipe_write" in (task / "wchan").read_text():
                return True
        except OSError:
            pass  # the thread ended
    return False


@pytest.mark.parametrize("hook", HOOKS)
def test_ctrl_c_during_a_slow_write_reaches_the_program(tmp_path: Path, hook: str) -> None:
    if hook == "compiled":
        require_compiled_hook()
    (tmp_path / "prog.py").write_text(BUSY)
    fifo = tmp_path / "trace.fifo"
    os.mkfifo(fifo)
    options = ["--pure"] if hook == "pure" else []
    proc = subprocess.Popen(
        [*TRACE, *options, "-o", str(fifo), "prog.py"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    received: list[bytes] = []
    try:
        reader = os.open(fifo, os.O_RDONLY)  # the trace file: read only once interrupted
        assert proc.stdout is not None
        assert proc.stdout.readline() == "ready\n"
        deadline = time.monotonic() + 120
        while not _blocked_writing(proc.pid):
            assert time.monotonic() < deadline, "the first buffer never filled the pipe"
            time.sleep(0.01)
        proc.send_signal(signal.SIGINT)

        def drain() -> None:
            with os.fdopen(reader, "rb") as f:
                received.append(f.read())

        thread = threading.Thread(target=drain)
        thread.start()
        stdout, stderr = proc.communicate(timeout=120)
        thread.join(timeout=120)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 0, stderr
    assert stdout == "interrupted\n"
    assert "error" not in stderr
    assert "Traceback" not in stderr
    trace_file = tmp_path / "got.pftrace"
    trace_file.write_bytes(received[0])
    trace = decode(trace_file)
    assert trace.problems == []
    names = trace.all_names()
    assert names.count("work") > 1000
    if hook == "compiled":  # the pure hook stops at the exception (Python removes it)
        assert "after" in names


@pytest.mark.parametrize("hook", HOOKS)
def test_a_full_disk_stops_recording_in_one_line(tmp_path: Path, hook: str) -> None:
    if hook == "compiled":
        require_compiled_hook()
    program = (
        "def f(i):\n    return i\nfor i in range(200_000):\n    f(i)\nprint('done')\nexit(3)\n"
    )
    (tmp_path / "prog.py").write_text(program)
    options = ["--pure"] if hook == "pure" else []
    proc = subprocess.run(
        [*TRACE, *options, "-o", "/dev/full", "prog.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 3
    assert proc.stdout == "done\n"
    assert "Traceback" not in proc.stderr
    stopped = "perfetto-trace: recording stopped: writing /dev/full: No space left on device"
    assert proc.stderr.splitlines().count(stopped) == 1
    summary = proc.stderr.splitlines()[1]
    assert "the trace is incomplete" in summary
    assert ": 0 events, " in summary
    assert "open it" not in proc.stderr
    lost = re.search(r"([\d,]+) lost", summary)
    assert lost is not None
    assert int(lost.group(1).replace(",", "")) > 10_000  # at least the first buffer's
