"""A SYSTEM session's read-back cut short by traced (the application stopped reading for
longer than traced's --consumer-timeout) raises TracingError instead of returning part of the
trace; the same application, not stopped, reads all of it."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from perfetto_testing import TIMEOUT, NotifyingDaemon

APP = str(Path(__file__).with_name("read_cut_main.py"))
TRACED = str(Path(sys.executable).with_name("traced"))
CONSUMER_TIMEOUT_S = 1.0


@contextmanager
def traced_env(tmp_path: Path, consumer_timeout_s: float) -> Iterator[dict[str, str]]:
    """The environment of an application talking to a traced on sockets under tmp_path."""
    env = dict(os.environ)
    env["PERFETTO_PRODUCER_SOCK_NAME"] = str(tmp_path / "producer")
    env["PERFETTO_CONSUMER_SOCK_NAME"] = str(tmp_path / "consumer")
    command = [TRACED, "--consumer-timeout", str(consumer_timeout_s)]
    with NotifyingDaemon("traced", command, env, "TRACED_NOTIFY_FD"):
        yield env


def _read_line(app: subprocess.Popen[bytes]) -> str:
    assert app.stdout is not None
    line = b""
    while not line.endswith(b"\n"):
        ready, _, _ = select.select([app.stdout], [], [], TIMEOUT)
        assert ready, "the application printed nothing"
        byte = os.read(app.stdout.fileno(), 1)
        assert byte, "the application exited"
        line += byte
    return line.decode().strip()


def _run(env: dict[str, str], stop_s: float) -> str:
    """Runs the application, stopped for `stop_s` once it starts reading; its last line."""
    app = subprocess.Popen([sys.executable, APP], env=env, stdout=subprocess.PIPE)
    try:
        assert _read_line(app) == "reading"
        if stop_s:
            app.send_signal(signal.SIGSTOP)
            time.sleep(stop_s)
            app.send_signal(signal.SIGCONT)
        result = _read_line(app)
        assert app.wait(TIMEOUT) == 0
    finally:
        if app.poll() is None:
            app.send_signal(signal.SIGCONT)
            app.kill()
            app.wait()
        if app.stdout is not None:
            app.stdout.close()
    return result


def test_a_read_cut_short_raises(tmp_path: Path) -> None:
    with traced_env(tmp_path, CONSUMER_TIMEOUT_S) as env:
        result = _run(env, stop_s=CONSUMER_TIMEOUT_S + 2)
    assert result == "error: the tracing service went away before the whole trace was read"


def test_the_same_read_not_stopped_gets_the_trace(tmp_path: Path) -> None:
    # Its traced waits 30 s for a reader: a loaded machine's pause is not a cut.
    with traced_env(tmp_path, 30.0) as env:
        result = _run(env, stop_s=0)
    assert result.startswith("read ")
    assert int(result.split()[1]) > 20_000 * 1000
