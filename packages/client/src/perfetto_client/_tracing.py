"""`Tracing`: initializes the backends, starts sessions and fires triggers."""

from __future__ import annotations

import enum
import os
import threading
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from perfetto_client._categories import registry
from perfetto_client._errors import TracingError
from perfetto_client._track_event import (
    BOOTTIME_CLOCK,
    forget_threads_after_fork,
    set_trace_clock,
    watch_thread_names,
)
from perfetto_client._track_event_writer import load_encoders
from perfetto_client._tracks import reset_process_uuid

if TYPE_CHECKING:
    # The backends pull in the service and protobuf: imported when tracing is initialized.
    from perfetto_smb import BufferExhaustedPolicy

    from perfetto_client._backends import InProcessBackend, SystemBackend
    from perfetto_client._producer import DataSourceKind
    from perfetto_client._session import TracingSession
    from perfetto_client._track_event_source import TrackEventKind

__all__ = ["Backend", "Tracing"]


class Backend(enum.IntFlag):
    """Where trace data goes: a service inside this process, the system's `traced`, or both."""

    IN_PROCESS = 1
    SYSTEM = 2


class _State:
    """What `Tracing.initialize` set up (one per process; reset in a forked child)."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.backends = Backend(0)
        self.in_process: InProcessBackend | None = None
        self.system: SystemBackend | None = None
        self.kinds: list[DataSourceKind] = []
        self.shmem_size_hint_kb = 0
        self.use_monotonic_clock = False
        self.track_event_policy: BufferExhaustedPolicy | None = None
        self.configured = False
        """Whether the first `initialize` set the options (the clock, the policy)."""
        self.track_event: TrackEventKind | None = None
        """The track_event data source, made when the first backend starts."""

    def all_kinds(self) -> list[DataSourceKind]:
        return list(self.kinds)


_state = _State()


class Tracing:
    """The entry point: `Tracing.initialize(...)`, then `Tracing.new_trace(...)` sessions."""

    @staticmethod
    def initialize(
        backends: Backend = Backend.IN_PROCESS,
        *,
        shmem_size_hint_kb: int = 0,
        use_monotonic_clock: bool = False,
        track_event_buffer_exhausted_policy: BufferExhaustedPolicy | None = None,
    ) -> None:
        """Starts the given backends (calling it again adds backends; options stay the first).

        `track_event_buffer_exhausted_policy` (a perfetto_smb.BufferExhaustedPolicy,
        STALL_THEN_DROP by default) is what track events do when the shared memory buffer is
        full, unless a session's data source config sets `buffer_exhausted_policy`.

        IN_PROCESS runs the tracing service inside this process, started when the first session
        needs it (`new_trace`); SYSTEM connects to `traced` through PERFETTO_PRODUCER_SOCK_NAME
        or the default socket (a missing service is one log line; the connection comes up, and
        comes back, whenever the service does).
        """
        backends = Backend(backends)
        with _state.lock:
            if not _state.configured:
                _state.configured = True
                _state.shmem_size_hint_kb = shmem_size_hint_kb
                _state.use_monotonic_clock = use_monotonic_clock
                _state.track_event_policy = track_event_buffer_exhausted_policy
                set_trace_clock(time.monotonic_ns if use_monotonic_clock else BOOTTIME_CLOCK)
                registry.on_new_category.append(_categories_changed)
                watch_thread_names()
            if Backend.SYSTEM in backends and _state.system is None:
                _start_system(warn_missing=True)
            _state.backends |= backends

    @staticmethod
    def is_initialized() -> bool:
        """Whether `initialize` was called (in this process)."""
        return bool(_state.backends)

    @staticmethod
    def new_trace(backend: Backend = Backend.IN_PROCESS) -> TracingSession:
        """A new session on `backend` (IN_PROCESS, or SYSTEM as a consumer of `traced`)."""
        # Sessions (protobuf, the service): 283 ms of CPU, with the first session.
        from perfetto_client._session import InProcessTransport, SystemTransport, TracingSession

        backend = Backend(backend)
        if backend == Backend.IN_PROCESS:
            in_process = in_process_backend()
            return TracingSession(lambda session: InProcessTransport(in_process, session))
        if backend == Backend.SYSTEM:
            # perfetto_service: 1.7 ms of CPU that `import perfetto_client` does not pay.
            from perfetto_service import consumer_socket_name

            socket_name = consumer_socket_name()
            return TracingSession(lambda session: SystemTransport(socket_name, session))
        raise TracingError("new_trace() needs exactly one backend: IN_PROCESS or SYSTEM")

    @staticmethod
    def activate_triggers(names: Sequence[str], ttl_ms: int = 0) -> None:
        """Fires triggers on every backend (sessions waiting for them start, stop or clone).

        `ttl_ms` is accepted for upstream's signature; triggers are sent at once.
        """
        del ttl_ms
        items = [names] if isinstance(names, str) else list(names)
        for backend in (_state.in_process, _state.system):
            if backend is not None:
                backend.activate_triggers(items)

    @staticmethod
    def setup_startup_tracing(
        config: Mapping[str, Any] | Any = None,
        *,
        timeout_ms: int = 10_000,
        max_kb: int = 4096,
    ) -> None:
        """Records track events from now on, before any system session exists.

        For the SYSTEM backend: events of the categories `config` (a TrackEventConfig or its
        dict form; all default-enabled categories if None) enables are kept in memory (up
        to `max_kb`); the first session of `traced` that starts track_event adopts them,
        each thread handing its events over on its next event. Without such a session
        within `timeout_ms`, they are dropped.
        """
        # protobuf: 31 + 40 ms of CPU, for startup tracing only.
        from google.protobuf import json_format
        from perfetto_protos.config.track_event.track_event_config_pb2 import TrackEventConfig

        if _state.system is None:
            raise TracingError("startup tracing needs the SYSTEM backend: initialize it first")
        kind = _state.track_event
        assert kind is not None
        if isinstance(config, TrackEventConfig):
            te_config = config
        else:
            te_config = json_format.ParseDict(dict(config or {}), TrackEventConfig())
        kind.abort_startup_tracing()
        startup = kind.start_startup_tracing(te_config, max_kb * 1024)
        timer = threading.Timer(timeout_ms / 1000, kind.abort_startup_tracing, (startup,))
        timer.daemon = True
        timer.start()

    @staticmethod
    def wait_connected(timeout: float = 10.0) -> bool:
        """Waits until the SYSTEM backend's producer is connected; True if it is."""
        system = _state.system
        return system is not None and system.wait_connected(timeout)


def _start_system(*, warn_missing: bool) -> SystemBackend:
    """Starts the SYSTEM backend (under the state's lock)."""
    # The service's IPC and shared memory: 289 ms of CPU, for Backend.SYSTEM only.
    from perfetto_client._backends import SystemBackend

    _track_event_kind()
    system = _state.system = SystemBackend(
        _state.all_kinds, shmem_size_hint_kb=_state.shmem_size_hint_kb, warn_missing=warn_missing
    )
    return system


def initialize_system_unless_missing() -> bool:
    """Initializes the SYSTEM backend, unless nothing listens on its UNIX socket.

    That is decided by the producer's first connection attempt; then nothing is logged, the
    backend is closed and forgotten (nothing of it runs), and the result is False.
    """
    with _state.lock:
        if _state.system is not None:
            return True
        Tracing.initialize(Backend(0))
        system = _start_system(warn_missing=False)
        if system.service_missing:
            system.close()
            _state.system = None
            return False
        _state.backends |= Backend.SYSTEM
        return True


def in_process_backend() -> InProcessBackend:
    """The in-process tracing service, started on first use (initializing IN_PROCESS if needed).

    Nothing before a session needs it: until then no data source runs, so `initialize` only
    records that the backend is wanted, and asyncio, protobuf and shared memory load here.
    """
    with _state.lock:
        if _state.in_process is None:
            # The service, asyncio and shared memory: 289 ms of CPU, with the first session.
            from perfetto_client._backends import InProcessBackend

            if Backend.IN_PROCESS not in _state.backends:
                Tracing.initialize(Backend.IN_PROCESS)
            _track_event_kind()
            _state.in_process = InProcessBackend(
                _state.all_kinds, shmem_size_hint_kb=_state.shmem_size_hint_kb
            )
        return _state.in_process


def _track_event_kind() -> TrackEventKind:
    """The track_event data source, made (and the event encoders bound) on the first call."""
    kind = _state.track_event
    if kind is None:
        # perfetto_smb (172 ms of CPU) and the data source (243 ms): with the first backend.
        from perfetto_smb import BufferExhaustedPolicy

        from perfetto_client._track_event_source import TrackEventKind

        load_encoders()
        kind = _state.track_event = TrackEventKind(
            use_monotonic_clock=_state.use_monotonic_clock,
            adopts_startup=True,
            buffer_exhausted_policy=_state.track_event_policy
            or BufferExhaustedPolicy.STALL_THEN_DROP,
        )
        _state.kinds.insert(0, kind)
    return kind


def register_kind(kind: DataSourceKind) -> None:
    """Adds a data source kind and registers it on every running backend."""
    with _state.lock:
        if kind not in _state.kinds:
            _state.kinds.append(kind)
        for backend in (_state.in_process, _state.system):
            if backend is not None:
                backend.register(kind)


def _categories_changed() -> None:
    kind = _state.track_event
    if kind is None:
        return
    for backend in (_state.in_process, _state.system):
        if backend is not None:
            backend.update(kind)


def _after_fork_in_child() -> None:
    """The child starts clean: no session, no backend, never the parent's shared memory."""
    global _state  # noqa: PLW0603 - a forked child replaces the whole state
    old = _state
    registry.reset_locks_after_fork()
    registry.stop_all()
    forget_threads_after_fork()
    reset_process_uuid()
    _state = _State()
    _state.lock = threading.RLock()
    kinds = [k for k in old.kinds if k is not old.track_event]
    for kind in kinds:
        after_fork = getattr(kind, "after_fork", None)
        if after_fork is not None:
            after_fork()
    if old.configured:
        registry.on_new_category.clear()
        system = Backend.SYSTEM in old.backends
        Tracing.initialize(
            Backend(0),
            shmem_size_hint_kb=old.shmem_size_hint_kb,
            use_monotonic_clock=old.use_monotonic_clock,
            track_event_buffer_exhausted_policy=old.track_event_policy,
        )
        _state.kinds.extend(kinds)
        if system:
            try:
                Tracing.initialize(Backend.SYSTEM)
            except Exception:
                # logging: 5 ms of CPU, on this failure only.
                import logging

                logging.getLogger("perfetto_client").exception(
                    "perfetto: the forked child could not reconnect to traced"
                )


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
