"""The SYSTEM backend against our traced in another process, with a consumer session."""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest
from perfetto_client import Backend, Tracing
from perfetto_testing import TIMEOUT, NotifyingDaemon, end_process
from trace_model import TraceModel

APP = str(Path(__file__).with_name("system_app_main.py"))
TRACED = str(Path(sys.executable).with_name("traced"))


class Traced:
    """traced on sockets in a temporary directory, started (and restarted) by `start`."""

    def __init__(self, directory: Path) -> None:
        self.env = dict(os.environ)
        self.env["PERFETTO_PRODUCER_SOCK_NAME"] = str(directory / "producer")
        self.env["PERFETTO_CONSUMER_SOCK_NAME"] = str(directory / "consumer")
        self.daemon: NotifyingDaemon | None = None

    def start(self) -> None:
        self.daemon = NotifyingDaemon("traced", [TRACED], self.env, "TRACED_NOTIFY_FD")

    def kill(self) -> None:
        if self.daemon is not None:
            end_process(self.daemon.process, signal.SIGKILL)
            self.daemon.close()
            self.daemon = None


class App:
    """The application process (system_app_main.py)."""

    started: ClassVar[list[App]] = []

    def __init__(self, env: dict[str, str], *args: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, APP, *args],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        App.started.append(self)

    def expect(self, line: str) -> None:
        """Reads the app's next line (unbuffered: select() must see what is left)."""
        assert self.process.stdout is not None
        fd = self.process.stdout.fileno()
        data = b""
        while not data.endswith(b"\n"):
            ready, _, _ = select.select([fd], [], [], TIMEOUT)
            assert ready, f"the app did not print {line!r}"
            byte = os.read(fd, 1)
            assert byte, f"the app exited before printing {line!r}"
            data += byte
        assert data.decode().strip() == line

    def send(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def close(self) -> str:
        _, err = self.process.communicate("", timeout=TIMEOUT)
        assert self.process.returncode == 0, err
        return err


@pytest.fixture(autouse=True)
def _end_apps() -> Iterator[None]:
    """Every app a test started is ended, whichever way the test ends."""
    yield
    for app in App.started:
        if app.process.poll() is None:
            app.process.kill()
        app.process.communicate()
    App.started.clear()


@pytest.fixture
def traced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Traced]:
    daemon = Traced(tmp_path)
    monkeypatch.setenv("PERFETTO_PRODUCER_SOCK_NAME", daemon.env["PERFETTO_PRODUCER_SOCK_NAME"])
    monkeypatch.setenv("PERFETTO_CONSUMER_SOCK_NAME", daemon.env["PERFETTO_CONSUMER_SOCK_NAME"])
    daemon.start()
    yield daemon
    daemon.kill()


def _record(app: App, tag: str) -> TraceModel:
    session = Tracing.new_trace(Backend.SYSTEM)
    session.setup({"data_sources": [{"config": {"name": "track_event"}}]})
    session.start()
    app.send(f"emit {tag}")
    app.expect(f"emitted {tag}")
    session.stop()
    trace = TraceModel(session.read_trace())
    session.close()
    return trace


def _check_app_events(trace: TraceModel, app_pid: int, tag: str) -> None:
    slices = trace.slices()
    main = [s for s in slices if s.name == f"main {tag}"]
    assert len(main) == 1
    assert main[0].args == {"tag": tag}
    names = [trace.track_name(s.track) for s in slices if s.name == "work" and s.args == {}]
    main_work = [s for s in slices if s.name == "work" and s.begin >= main[0].begin]
    assert [trace.track_name(s.track) for s in main_work].count("MainThread") == 3
    assert {f"worker {tag} {i}" for i in range(3)} <= set(names)
    nested = [
        s
        for s in slices
        if s.name == "work"
        and trace.track_name(s.track) == "MainThread"
        and s.begin >= main[0].begin
    ]
    assert [s.depth for s in nested] == [1, 2, 3]
    assert trace.counters("progress") == [len(tag)]
    assert [s.name for s in slices if s.name.startswith("async")] == [f"async {tag}"]
    pids = {e.pid for e in trace.events}
    assert pids == {app_pid}


def test_app_events_reach_a_system_session(traced: Traced) -> None:
    app = App(traced.env)
    app.expect("connected 1")
    trace = _record(app, "first")
    _check_app_events(trace, app.process.pid, "first")
    app.close()


def test_app_reconnects_when_traced_restarts(traced: Traced) -> None:
    app = App(traced.env)
    app.expect("connected 1")
    traced.kill()
    traced.start()
    app.expect("connected 2")
    trace = _record(app, "after-restart")
    _check_app_events(trace, app.process.pid, "after-restart")
    app.close()


def test_missing_traced_is_one_log_line(tmp_path: Path) -> None:
    env = dict(os.environ)
    env["PERFETTO_PRODUCER_SOCK_NAME"] = str(tmp_path / "nobody")
    app = App(env)
    err = app.close()
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines == [
        f"perfetto: no tracing service at {tmp_path / 'nobody'} yet; "
        "events go nowhere until it starts"
    ]


def test_app_started_before_traced_says_so_once_and_connects_when_it_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    traced = Traced(tmp_path)
    monkeypatch.setenv("PERFETTO_PRODUCER_SOCK_NAME", traced.env["PERFETTO_PRODUCER_SOCK_NAME"])
    monkeypatch.setenv("PERFETTO_CONSUMER_SOCK_NAME", traced.env["PERFETTO_CONSUMER_SOCK_NAME"])
    app = App(traced.env, "--startup")
    app.expect("startup events written")  # initialized: its first connection attempt is over
    try:
        traced.start()
        app.expect("connected 1")
        trace = _record(app, "late")
        _check_app_events(trace, app.process.pid, "late")
        err = app.close()
    finally:
        traced.kill()
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines == [
        f"perfetto: no tracing service at {tmp_path / 'producer'} yet; "
        "events go nowhere until it starts"
    ]


def test_an_app_connects_to_the_service_once(tmp_path: Path) -> None:
    """A producer starting while the service listens makes one connection (traced's cost)."""
    path = tmp_path / "producer"
    env = dict(os.environ)
    env["PERFETTO_PRODUCER_SOCK_NAME"] = str(path)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(str(path))
        listener.listen(8)
        listener.settimeout(TIMEOUT)
        app = App(env)
        connections = 0
        while True:
            conn, _ = listener.accept()
            connections += 1
            with conn:
                conn.settimeout(TIMEOUT)
                if conn.recv(1):  # the producer's connection: it binds ProducerPort
                    break
    assert connections == 1
    assert app.process.poll() is None


def test_startup_tracing_is_adopted_by_the_first_session(traced: Traced) -> None:
    app = App(traced.env, "--startup")
    app.expect("startup events written")
    app.expect("connected 1")
    trace = _record(app, "later")
    slices = trace.slices()
    early = [s for s in slices if s.name == "before any session"]
    assert len(early) == 1
    assert early[0].args == {"early": True}
    end = early[0].end
    assert end is not None
    startup_work = [s for s in slices if s.name == "work" and s.begin < end]
    assert [s.depth for s in startup_work] == [1, 2]
    _check_app_events(trace, app.process.pid, "later")
    main_seqs = {e.seq for e in trace.events if trace.track_name(e.track) == "MainThread"}
    assert len(main_seqs) == 1  # the startup sequence went on into the session
    app.close()
