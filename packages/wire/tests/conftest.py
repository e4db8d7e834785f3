"""Fixtures for the perfetto_wire tests."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from perfetto_wire import HostServer
from wire_peer import build_host
from wire_testlib import LoopThread, Processes, ThreadHost


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    """A short directory for socket files (sun_path holds only 107 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="pw-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def processes() -> Iterator[Processes]:
    """Starts peers in child processes and reaps them after the test."""
    procs = Processes()
    yield procs
    procs.cleanup()


@pytest.fixture
def loop_thread() -> Iterator[LoopThread]:
    """An asyncio loop on a background thread."""
    thread = LoopThread()
    yield thread
    thread.stop()


@pytest.fixture
def thread_host(loop_thread: LoopThread, sock_dir: Path) -> Iterator[ThreadHost]:
    """The test host on a loop thread of this process, listening on a UNIX socket."""

    def setup() -> ThreadHost:
        host, services = build_host(loop_thread.loop)
        server = HostServer(host, loop=loop_thread.loop)
        address = server.listen(str(sock_dir / "host.sock"))
        return ThreadHost(loop_thread, server, services, address)

    served = loop_thread.call(setup)
    yield served
    loop_thread.call(served.server.close)
