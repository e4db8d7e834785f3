"""Fixtures shared by the perfetto_wire tests: test peers in other processes and threads."""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib.util
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

import pytest
from perfetto_wire import HostServer

T = TypeVar("T")

PEER_SCRIPT = Path(__file__).with_name("wire_peer.py")
PROCESS_TIMEOUT = 20.0


def _load_peer() -> ModuleType:
    spec = importlib.util.spec_from_file_location("perfetto_wire_test_peer", PEER_SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def peer() -> ModuleType:
    """The `wire_peer` helper module (test service, memfd helpers)."""
    return _load_peer()


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    """A short directory for socket files (sun_path holds only 107 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="pw-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@dataclass
class HostProcess:
    """A `wire_peer.py host` child process."""

    process: subprocess.Popen[str]
    address: str

    def alive(self) -> bool:
        return self.process.poll() is None


@dataclass
class Processes:
    """Every child process a test started; all are killed and reaped at teardown."""

    children: list[subprocess.Popen[str]] = field(default_factory=list)

    def start_host(self, address: str, *args: str) -> HostProcess:
        process = self.spawn("host", address, *args)
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line.startswith("READY "):
            process.kill()
            _, err = process.communicate(timeout=PROCESS_TIMEOUT)
            raise AssertionError(f"host did not start: {line!r} {err}")
        return HostProcess(process, line.split(" ", 1)[1].strip())

    def spawn(self, *args: str) -> subprocess.Popen[str]:
        process = subprocess.Popen(
            [sys.executable, str(PEER_SCRIPT), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.children.append(process)
        return process

    def run(self, *args: str) -> str:
        """Runs a client peer to completion and returns its stdout."""
        process = self.spawn(*args)
        out, err = process.communicate(timeout=PROCESS_TIMEOUT)
        assert process.returncode == 0, err
        return out

    def cleanup(self) -> None:
        for process in self.children:
            if process.poll() is None:
                process.terminate()
        for process in self.children:
            try:
                process.communicate(timeout=PROCESS_TIMEOUT)
            except subprocess.TimeoutExpired:
                process.kill()
                process.communicate()


@pytest.fixture
def processes() -> Iterator[Processes]:
    """Starts peers in child processes and reaps them after the test."""
    procs = Processes()
    yield procs
    procs.cleanup()


class LoopThread:
    """An asyncio loop on a background thread, for hosts served inside the test process."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def call(self, fn: Callable[[], T], timeout: float = PROCESS_TIMEOUT) -> T:
        """Runs `fn` on the loop thread and returns its result."""
        future: concurrent.futures.Future[T] = concurrent.futures.Future()

        def run() -> None:
            try:
                future.set_result(fn())
            except BaseException as exc:
                future.set_exception(exc)

        self.loop.call_soon_threadsafe(run)
        return future.result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(PROCESS_TIMEOUT)
        self.loop.close()


@dataclass
class ThreadHost:
    """The test ProducerPort host, served from a loop thread of the test process."""

    loop_thread: LoopThread
    server: HostServer
    service: Any
    address: str

    def call(self, fn: Callable[[], T]) -> T:
        return self.loop_thread.call(fn)


@pytest.fixture
def thread_host(peer: ModuleType, sock_dir: Path) -> Iterator[ThreadHost]:
    """The test host on a loop thread of this process, listening on a UNIX socket."""
    loop_thread = LoopThread()

    def setup() -> tuple[HostServer, Any, str]:
        host, service = peer.build_host(loop_thread.loop)
        server = HostServer(host, loop=loop_thread.loop)
        return server, service, server.listen(str(sock_dir / "host.sock"))

    server, service, address = loop_thread.call(setup)
    yield ThreadHost(loop_thread, server, service, address)
    loop_thread.call(server.close)
    loop_thread.stop()


@pytest.fixture
def loop_thread() -> Iterator[LoopThread]:
    """A bare loop thread."""
    thread = LoopThread()
    yield thread
    thread.stop()
