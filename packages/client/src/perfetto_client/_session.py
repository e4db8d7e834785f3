"""A tracing session: a consumer that configures the service, starts, stops and reads a trace."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, Protocol

from google.protobuf import json_format, text_format
from perfetto_protos.common.observable_events_pb2 import ObservableEvents
from perfetto_protos.common.trace_stats_pb2 import TraceStats
from perfetto_protos.config.trace_config_pb2 import TraceConfig
from perfetto_service import (
    ConsumerEndpoint,
    ConsumerIPCClient,
    TracePacketSlices,
    trace_file_bytes,
)

from perfetto_client._errors import TracingError

__all__ = ["ConfigLike", "TracingSession", "make_trace_config"]

ConfigLike = TraceConfig | Mapping[str, Any] | str | bytes
"""A TraceConfig, its dict form (as json_format), or its text-proto form."""

_TIMEOUT = 10.0


def make_trace_config(config: ConfigLike | None) -> TraceConfig:
    """A TraceConfig from any accepted form; a session with no buffers gets one of 4 MiB and a
    session with no data sources records every default-enabled track event category."""
    if config is None:
        result = TraceConfig()
    elif isinstance(config, TraceConfig):
        result = TraceConfig()
        result.CopyFrom(config)
    elif isinstance(config, Mapping):
        try:
            result = json_format.ParseDict(dict(config), TraceConfig())
        except json_format.ParseError as exc:
            raise TracingError(f"bad trace config: {exc}") from None
    elif isinstance(config, str | bytes):
        text = config.decode() if isinstance(config, bytes) else config
        try:
            result = text_format.Parse(text, TraceConfig())
        except text_format.ParseError as exc:
            raise TracingError(f"bad trace config: {exc}") from None
    else:
        raise TracingError(f"a trace config cannot be a {type(config).__name__}")
    if not result.buffers:
        result.buffers.add(size_kb=4096)
    if not result.data_sources:
        result.data_sources.add().config.name = "track_event"
    return result


class _Transport(Protocol):
    """How a session reaches its consumer endpoint."""

    endpoint: ConsumerEndpoint

    def call(self, fn: Callable[[], object]) -> None:
        """Runs `fn` where the endpoint may be used."""

    def enable_tracing(self, config: TraceConfig, fd: int | None) -> None:
        """EnableTracing; the caller keeps `fd` (the service gets its own copy)."""

    def close(self) -> None:
        """Disconnects the consumer."""


class TracingSession:
    """A tracing session on one backend (`Tracing.new_trace`).

    `setup(config, output=None)` then `start()`, `stop()`, `read_trace()`; `flush()`,
    `trace_stats()`; usable as a context manager (start on enter, stop on exit). `on_start`,
    `on_stop` and `on_error` are callbacks (set them as attributes) called from the service's
    thread. With `output` (a path or an open file descriptor) the trace streams into that file.
    """

    def __init__(self, connect: Callable[[TracingSession], _Transport]) -> None:
        self._lock = threading.Condition()
        self._connect = connect
        self._transport: _Transport | None = None
        self.config: TraceConfig | None = None
        self._output_fd: int | None = None
        self._owns_fd = False
        self._output_path: str | None = None
        self._started = False
        self._all_started = False
        self._stopped = False
        self._error = ""
        self._chunks: list[bytes] = []
        self._read_done = False
        self._read_complete = False
        self._stats: list[tuple[bool, TraceStats]] = []
        self.on_start: Callable[[], None] | None = None
        self.on_stop: Callable[[], None] | None = None
        self.on_error: Callable[[str], None] | None = None

    # Public API -----------------------------------------------------------------------

    def setup(
        self, config: ConfigLike | None = None, output: str | os.PathLike[str] | int | None = None
    ) -> None:
        """Configures the session; `output` is a file path or a writable file descriptor."""
        if self._started:
            raise TracingError("setup() must come before start()")
        self.config = make_trace_config(config)
        if output is not None:
            if isinstance(output, int):
                self._output_fd = output
            else:
                self._output_path = os.fspath(output)
                self._output_fd = os.open(
                    self._output_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644
                )
                self._owns_fd = True
            self.config.write_into_file = True

    def start(self, timeout: float = _TIMEOUT) -> None:
        """Starts the session; returns once every data source has started (or `timeout`)."""
        if self._started:
            raise TracingError("the session was already started")
        if self.config is None:
            self.setup()
        assert self.config is not None
        self._started = True
        transport = self._transport = self._connect(self)
        config = self.config
        fd = self._output_fd
        endpoint = transport.endpoint
        started = ObservableEvents.TYPE_ALL_DATA_SOURCES_STARTED
        transport.call(lambda: endpoint.observe_events(started))
        transport.enable_tracing(config, fd)
        with self._lock:
            self._lock.wait_for(lambda: self._all_started or self._stopped, timeout)
        if self._stopped and self._error:
            raise TracingError(f"the session could not start: {self._error}")

    def flush(self, timeout_ms: int = 5000) -> bool:
        """Asks every data source to commit what it wrote; False if that timed out."""
        transport = self._require_started()
        results: list[bool] = []
        done = threading.Event()

        def on_flush(success: bool) -> None:
            results.append(success)
            done.set()

        endpoint = transport.endpoint
        transport.call(lambda: endpoint.flush(timeout_ms, on_flush))
        done.wait(timeout_ms / 1000 + _TIMEOUT)
        return bool(results and results[0])

    def stop(self, timeout: float = _TIMEOUT) -> None:
        """Flushes, stops the session and waits until it ended."""
        transport = self._require_started()
        if self._stopped:
            return
        self.flush()
        endpoint = transport.endpoint
        transport.call(endpoint.disable_tracing)
        with self._lock:
            self._lock.wait_for(lambda: self._stopped, timeout)

    def read_trace(self, timeout: float = _TIMEOUT) -> bytes:
        """The trace as a .pftrace file's bytes (the file's contents when writing to `output`).

        Raises TracingError if no data arrives for `timeout` seconds: a large trace takes as
        long as it needs while data keeps flowing.
        """
        transport = self._require_started()
        if self._output_path is not None and self._stopped:
            with open(self._output_path, "rb") as f:
                return f.read()
        with self._lock:
            self._chunks = []
            self._read_done = False
            self._read_complete = False
        endpoint = transport.endpoint
        transport.call(endpoint.read_buffers)
        received = -1

        def progressed() -> bool:
            return self._read_done or len(self._chunks) > received

        with self._lock:
            while not self._read_done and received < len(self._chunks):
                received = len(self._chunks)
                self._lock.wait_for(progressed, timeout)
            if not self._read_done:
                raise TracingError(f"no trace data arrived for {timeout:g} s while reading")
            if not self._read_complete:
                raise TracingError("the tracing service went away before the whole trace was read")
            return b"".join(self._chunks)

    def trace_stats(self, timeout: float = _TIMEOUT) -> TraceStats:
        """The service's statistics of this session (buffers, chunks, losses)."""
        transport = self._require_started()
        with self._lock:
            self._stats = []
        endpoint = transport.endpoint
        transport.call(endpoint.get_trace_stats)
        with self._lock:
            if not self._lock.wait_for(lambda: bool(self._stats), timeout):
                raise TracingError("timed out waiting for trace stats")
            return self._stats[0][1]

    def close(self) -> None:
        """Ends the session (stopping it if needed) and disconnects."""
        if self._started and not self._stopped:
            self.stop()
        if self._transport is not None:
            self._transport.close()
            self._transport = None
        if self._owns_fd and self._output_fd is not None:
            os.close(self._output_fd)
            self._output_fd = None

    def __enter__(self) -> TracingSession:
        if not self._started:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._started and not self._stopped:
            self.stop()

    def _require_started(self) -> _Transport:
        if self._transport is None:
            raise TracingError("the session is not started")
        return self._transport

    # perfetto_service.Consumer ----------------------------------------------------------

    def on_connect(self) -> None:
        pass

    def on_disconnect(self) -> None:
        with self._lock:
            if not self._stopped:
                self._error = self._error or "the tracing service went away"
                self._stopped = True
            self._read_done = True
            self._lock.notify_all()

    def on_tracing_disabled(self, error: str) -> None:
        with self._lock:
            self._stopped = True
            self._error = error
            self._lock.notify_all()
        if error and self.on_error is not None:
            self.on_error(error)
        if self.on_stop is not None:
            self.on_stop()

    def on_trace_data(self, packets: Sequence[TracePacketSlices], has_more: bool) -> None:
        data = trace_file_bytes(packets)
        with self._lock:
            self._chunks.append(data)
            if not has_more:
                self._read_done = True
                self._read_complete = True
            self._lock.notify_all()

    def on_detach(self, success: bool) -> None:
        pass

    def on_attach(self, success: bool, config: TraceConfig) -> None:
        pass

    def on_trace_stats(self, success: bool, stats: TraceStats) -> None:
        with self._lock:
            self._stats.append((success, stats))
            self._lock.notify_all()

    def on_observable_events(self, events: ObservableEvents) -> None:
        if events.all_data_sources_started:
            with self._lock:
                self._all_started = True
                self._lock.notify_all()
            if self.on_start is not None:
                self.on_start()


class InProcessTransport:
    """A consumer connected straight to the in-process service."""

    def __init__(self, backend: Any, session: TracingSession) -> None:
        self._backend = backend
        self.endpoint: ConsumerEndpoint = backend.call(
            lambda: backend.service.connect_consumer(session, os.getuid())
        )

    def call(self, fn: Callable[[], object]) -> None:
        self._backend.post(fn)

    def enable_tracing(self, config: TraceConfig, fd: int | None) -> None:
        # The in-process service takes ownership of the descriptor it is given.
        own = os.dup(fd) if fd is not None else None
        endpoint = self.endpoint
        self._backend.post(lambda: endpoint.enable_tracing(config, own))

    def close(self) -> None:
        endpoint = self.endpoint

        def free_and_disconnect() -> None:
            endpoint.free_buffers()
            endpoint.disconnect()  # type: ignore[attr-defined]

        self._backend.call(free_and_disconnect)


class SystemTransport:
    """A consumer connected to the system service over its consumer socket."""

    def __init__(self, socket_name: str, session: TracingSession) -> None:
        client = ConsumerIPCClient(socket_name, session)
        client.connect()
        if not client.wait_connected(_TIMEOUT):
            client.close()
            raise TracingError(f"cannot connect to the tracing service at {socket_name}")
        self.endpoint: ConsumerEndpoint = client
        self._client = client

    def call(self, fn: Callable[[], object]) -> None:
        fn()

    def enable_tracing(self, config: TraceConfig, fd: int | None) -> None:
        self._client.enable_tracing(config, fd)  # sends a duplicate of `fd`

    def close(self) -> None:
        self._client.free_buffers()
        self._client.close()
