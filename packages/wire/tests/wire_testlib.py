"""Helpers shared by the perfetto_wire tests: peers in child processes and loop threads."""

from __future__ import annotations

import asyncio
import concurrent.futures
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from perfetto_wire import HostServer
from wire_peer import PeerServices

T = TypeVar("T")

PEER_SCRIPT = Path(__file__).with_name("wire_peer.py")
PROCESS_TIMEOUT = 20.0


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
    services: PeerServices
    address: str

    def call(self, fn: Callable[[], T]) -> T:
        return self.loop_thread.call(fn)
