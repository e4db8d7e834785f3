"""The client side, loaded into the profiled Python process.

`enable()` installs the handler of the profiling signal; `connect()` does the handshake with
the daemon, installs the allocator hooks (compiled code, no pure fallback) and starts
sampling until the session ends.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import select
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType, ModuleType

from heapprofd._errors import HeapprofdError
from heapprofd._preload import preload_connection
from heapprofd._process_matcher import PROFILING_SIGNAL
from heapprofd._wire import ClientConfiguration, client_handshake, default_socket_path

__all__ = ["DEFAULT_HEAP", "Heap", "connect", "enable", "is_profiling", "wait_until_profiling"]

_log = logging.getLogger("heapprofd")

DEFAULT_HEAP = "python"
"""The heap of Python's own allocators (raw, mem and object domains)."""

NOT_COMPILED = (
    "heapprofd's client is compiled code and is not built here "
    "(install perfetto-heapprofd where a C compiler is available)"
)

_lock = threading.RLock()
_heaps: list[Heap] = []


class _State:
    """The process's client state (guarded by `_lock`)."""

    config: ClientConfiguration | None = None
    connection: _Connection | None = None
    enabled = False
    connections = 0


_state = _State()


def _native() -> ModuleType:
    loaded = sys.modules.get("heapprofd._native")
    if loaded is not None:
        return loaded
    from protozero import _native as build

    build.refuse_stale("heapprofd")  # a checkout's stale build: one line saying so
    try:
        from heapprofd import _native as native
    except ImportError as exc:
        raise HeapprofdError(NOT_COMPILED) from exc
    return native


class Heap:
    """A custom heap, like upstream's AHeapInfo: report its allocations and frees by id.

    `on_enabled(interval)` runs when a session starts profiling this heap, `on_disabled()`
    when it stops.
    """

    def __init__(
        self,
        name: str,
        on_enabled: Callable[[int], None] | None = None,
        on_disabled: Callable[[], None] | None = None,
    ) -> None:
        native = _native()
        self.name = name
        self.on_enabled = on_enabled
        self.on_disabled = on_disabled
        enable()
        with _lock:
            self._index: int = native.register_heap()
            self._report_allocation = native.report_allocation
            self._report_free = native.report_free
            _heaps.append(self)
            config = _state.config
            if _state.connection is not None and config is not None and native.is_active():
                _start_heap(self, config.interval_for(name))

    @property
    def enabled(self) -> bool:
        return bool(_native().heap_enabled(self._index))

    def report_allocation(self, alloc_id: int, size: int) -> bool:
        """Reports an allocation; True when it was sampled."""
        return bool(self._report_allocation(self._index, alloc_id, size))

    def report_free(self, alloc_id: int) -> bool:
        """Reports the free of an allocation; True when it had been sampled."""
        return bool(self._report_free(self._index, alloc_id))


class _Connection:
    """The live connection: the socket, the ring buffer, and a thread waiting for its end."""

    def __init__(self, sock: socket.socket, ring: object) -> None:
        self.sock = sock
        self.ring = ring
        self._watch = sock.dup()
        self._thread = threading.Thread(target=self._wait_end, name="heapprofd-client", daemon=True)
        self._thread.start()

    def _wait_end(self) -> None:
        native = _native()
        native.set_own_thread(True)
        while native.is_active():
            try:
                ready, _, _ = select.select([self._watch], [], [], 0.2)
                if ready and not self._watch.recv(1, socket.MSG_PEEK):
                    break
            except OSError:
                break
        _disconnected(self)


def _start_heap(heap: Heap, interval: int) -> None:
    native = _native()
    if interval:
        native.send_heap_name(heap._index, heap.name.encode(), interval)
    native.set_heap_interval(heap._index, interval)
    if interval and heap.on_enabled is not None:
        heap.on_enabled(interval)


def _disconnected(connection: _Connection) -> None:
    native = _native()
    with _lock:
        if _state.connection is not connection:
            return
        native.uninstall_hooks()
        _state.connection = None
        for heap in _heaps:
            if heap.on_disabled is not None and heap._index:
                try:
                    heap.on_disabled()
                except Exception:
                    _log.exception("heap %s: on_disabled failed", heap.name)
        connection._watch.close()
        connection.sock.close()


def enable() -> None:
    """Makes this process profilable: hooks in place, the profiling signal handled."""
    native = _native()
    with _lock:
        if _state.enabled:
            return
        if not _heaps:
            _heaps.append(_python_heap())
        if threading.current_thread() is threading.main_thread():
            signal.signal(PROFILING_SIGNAL, _on_signal)
        atexit.register(native.deactivate)
        os.register_at_fork(after_in_child=_after_fork_in_child)
        _state.enabled = True


@contextlib.contextmanager
def own_allocations() -> Iterator[None]:
    """Within it, this thread's allocations are heapprofd's own and are not sampled."""
    native = _native()
    own = native.set_own_thread(True)
    try:
        yield
    finally:
        native.set_own_thread(own)


def leave_out_runner_frames() -> None:
    """Leaves the frames that run the program (the caller's, its callers' and runpy's) out of
    the program's samples: its stacks start at the program's own outermost frame."""
    import runpy

    codes = [
        runpy.run_path.__code__,
        runpy.run_module.__code__,
        runpy._run_module_code.__code__,  # type: ignore[attr-defined]
        runpy._run_code.__code__,  # type: ignore[attr-defined]
    ]
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        codes.append(frame.f_code)
        frame = frame.f_back
    _native().set_runner_codes(codes)


def _after_fork_in_child() -> None:
    """A forked child stops profiling: the connection and buffer are its parent's."""
    native = _native()
    native.uninstall_hooks()
    _state.connection = None


def _python_heap() -> Heap:
    heap = Heap.__new__(Heap)
    heap.name = DEFAULT_HEAP
    heap.on_enabled = None
    heap.on_disabled = None
    heap._index = 0
    return heap


def _on_signal(_signum: int, _frame: FrameType | None) -> None:
    try:
        connect()
    except (OSError, HeapprofdError) as exc:
        _log.info("heapprofd: cannot connect: %s", exc)


def connect(path: str | None = None) -> bool:
    """Handshakes with the daemon; True when a session now profiles this process."""
    native = _native()
    enable()
    with _lock:
        if _state.connection is not None and native.is_active():
            return True
        shared = preload_connection()
        sock, config, ring_fd = shared or client_handshake(path or default_socket_path())
        try:
            ring = native.SharedRingBuffer.attach(ring_fd)
        except (OSError, ValueError):
            os.close(ring_fd)
            sock.close()
            raise
        intervals = [0] * len(_heaps)
        for heap in _heaps:
            intervals[heap._index] = config.interval_for(heap.name)
        _state.config = config
        with own_allocations():  # what connecting allocates is not the program's
            # sampling starts once every heap's name has been written
            native.activate(
                ring,
                sock.fileno(),
                [0] * len(_heaps),
                config.block_client,
                config.block_client_timeout_us,
            )
            _state.connection = _Connection(sock, ring)
        _state.connections += 1
        for heap in _heaps:
            if intervals[heap._index]:
                _start_heap(heap, intervals[heap._index])
        return True


def is_profiling() -> bool:
    """True while a session profiles this process."""
    try:
        return bool(_native().is_active())
    except HeapprofdError:
        return False


def connections() -> int:
    """How many times a session connected to this process."""
    return _state.connections


def wait_until_profiling(timeout_s: float) -> bool:
    """Waits (handling the profiling signal) until a session profiles this process."""
    deadline = time.monotonic() + timeout_s
    while not is_profiling():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        time.sleep(min(0.01, remaining))
    return True
