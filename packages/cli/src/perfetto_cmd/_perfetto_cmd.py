"""The `perfetto` command: drives one tracing session (or query, attach, trigger) end to end."""

from __future__ import annotations

import contextlib
import os
import select
import sys
import threading
import time
from collections.abc import Sequence

from perfetto_protos.common.observable_events_pb2 import ObservableEvents
from perfetto_protos.common.trace_stats_pb2 import TraceStats
from perfetto_protos.common.tracing_service_state_pb2 import TracingServiceState
from perfetto_protos.config.trace_config_pb2 import TraceConfig
from perfetto_service import (
    TRACE_FILE_WRITE_FAILED,
    ConsumerIPCClient,
    SessionCloned,
    TracePacketSlices,
    consumer_socket_name,
)

from perfetto_cmd._errors import CliError, log
from perfetto_cmd._losses import loss_line
from perfetto_cmd._output import TraceOutput
from perfetto_cmd._progress import ProgressLine
from perfetto_cmd._query import format_service_state
from perfetto_cmd._stop_signals import STOP_REQUESTED, handle_stop_signals, ignore_stop_signals

__all__ = ["EXIT_NOT_DETACHED", "SessionRunner", "daemonize"]

EXIT_NOT_DETACHED = 2
_ON_TRACE_DATA_TIMEOUT_S = 3.0
_FINAL_STATS_TIMEOUT_S = 3.0
_BACKGROUND_WAIT_S = 30.0
_WAIT_OK = 0
_WAIT_TIMEOUT = 1
_WAIT_OTHER_ERROR = 2
_STATS_PERIOD_S = 1.0
_DOC_URL = "https://perfetto.dev/docs/quickstart/linux-tracing"


def daemonize(wait: bool) -> int | None:
    """Forks into the background; the parent prints the child's pid and returns its exit code.

    With `wait` the parent waits (30 s at most) for the child to report that every data source
    started. Returns None in the child, which carries on detached from the terminal and reports
    that status when the session's data sources started (or it failed).
    """
    ready_r, ready_w = os.pipe()
    status_r, status_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(ready_r)
        os.close(status_r)
        os.setsid()
        os.chdir("/")
        null = os.open(os.devnull, os.O_RDWR)
        for target in (0, 1, 2):
            os.dup2(null, target)
        os.close(null)
        os.write(ready_w, b"1")
        os.close(ready_w)
        _BackgroundPipe.fd = status_w if wait else -1
        if not wait:
            os.close(status_w)
        return None
    os.close(ready_w)
    os.close(status_w)
    os.read(ready_r, 1)
    os.close(ready_r)
    print(pid, flush=True)
    if not wait:
        os.close(status_r)
        return 0
    try:
        ready, _, _ = select.select([status_r], [], [], _BACKGROUND_WAIT_S)
        if not ready:
            log("Timeout waiting for all data sources to start")
            return _WAIT_TIMEOUT
        status = os.read(status_r, 1)
    finally:
        os.close(status_r)
    if not status:
        log("Background process didn't report anything")
        return _WAIT_OTHER_ERROR
    if status[0] != _WAIT_OK:
        log(f"Background process failed, WaitStatus={status[0]}")
        return status[0]
    return 0


class _BackgroundPipe:
    """The write end of the `-D` status pipe in the background child (-1 if none)."""

    fd = -1


def _notify(fd: int, status: int) -> int:
    if fd >= 0:
        with contextlib.suppress(OSError):
            os.write(fd, bytes([status]))
            os.close(fd)
    return -1


class SessionRunner:
    """A consumer that runs one session, or answers --query / --attach / --is_detached.

    Callbacks run on the IPC thread; the main thread waits for the end in `run`. With
    `stop_on_signals`, SIGINT and SIGTERM stop the session, and are ignored once it is over.
    """

    def __init__(
        self,
        config: TraceConfig | None,
        output: TraceOutput | None,
        *,
        detach_key: str | None = None,
        attach_key: str | None = None,
        is_detached: bool = False,
        stop_once_attached: bool = False,
        query: bool = False,
        query_long: bool = False,
        query_raw: bool = False,
        notify_fd: int | None = None,
        progress: bool = False,
        clone_tsid: int | None = None,
        clone_name: str | None = None,
        stop_on_signals: bool = True,
    ) -> None:
        self.config = config
        self.output = output
        self.detach_key = detach_key
        self.attach_key = attach_key
        self.is_detached = is_detached
        self.stop_once_attached = stop_once_attached
        self.query = query
        self.query_long = query_long
        self.query_raw = query_raw
        self.notify_fd = -1 if notify_fd is None else notify_fd
        self.socket = consumer_socket_name()
        self.client = ConsumerIPCClient(self.socket, self)
        self._connected = False
        self._done = threading.Event()
        self._exit_code = 1
        self._stop_on_signals = stop_on_signals
        self._stop_requested = STOP_REQUESTED if stop_on_signals else threading.Event()
        self._stopping = False
        self._last_data = 0.0
        self._reading = False
        self._final_stats_deadline = 0.0
        """When the TraceStats asked for at the end are given up on (0: not asked yet)."""
        self._writing = False
        self._started_at = 0.0
        self._progress = ProgressLine() if progress else None
        self._buffer_bytes = 0
        self.clone_tsid = clone_tsid
        self.clone_name = clone_name
        self._snapshots: list[threading.Thread] = []

    @property
    def expected_duration_ms(self) -> int:
        """The session's duration, or its trigger timeout plus the longest stop delay."""
        config = self.config
        if config is None:
            return 0
        if config.duration_ms:
            return config.duration_ms
        triggers = config.trigger_config
        delay = max((t.stop_delay_ms for t in triggers.triggers), default=0)
        return triggers.trigger_timeout_ms + delay if triggers.trigger_timeout_ms else 0

    def run(self) -> int:
        """Connects, runs until the session is over (or a signal stops it); the exit status."""
        if self._stop_on_signals:
            handle_stop_signals()
        try:
            self.client.connect()
            while not self._done.wait(0.1):
                self._tick()
        finally:
            if self._stop_on_signals:
                ignore_stop_signals()
            self.client.close()
            if self._progress is not None:
                self._progress.clear()
            for snapshot in self._snapshots:
                snapshot.join()
        self.notify_fd = _notify(self.notify_fd, _WAIT_OK if self._exit_code == 0 else 2)
        _BackgroundPipe.fd = _notify(_BackgroundPipe.fd, 0 if self._exit_code == 0 else 2)
        return self._exit_code

    def _finish(self, code: int) -> None:
        self._exit_code = code
        self._done.set()

    def _tick(self) -> None:
        """Runs on the main thread every 100 ms: signals, the read-back timeout, progress."""
        if self._stop_requested.is_set() and not self._stopping:
            self._stopping = True
            if self._connected:
                log("SIGINT/SIGTERM received: disabling tracing.")
                self._flush_and_disable()
            else:
                self._finish(1)
        if (
            self._reading
            and not self._writing
            and time.monotonic() - self._last_data > _ON_TRACE_DATA_TIMEOUT_S
        ):
            self._fail(
                f"Timed out while waiting for OnTraceData, aborting: {self._incomplete_trace()}"
            )
        if 0 < self._final_stats_deadline < time.monotonic():
            log("Timed out waiting for the trace stats: data lost unknown")
            self._finalize(None)
        progress = self._progress
        if progress is not None and self._started_at and not self._reading:
            elapsed = time.monotonic() - self._started_at
            if progress.due(_STATS_PERIOD_S):
                self.client.get_trace_stats()
            progress.show(elapsed, self.expected_duration_ms / 1000, self._buffer_bytes)

    def _flush_and_disable(self) -> None:
        def flushed(success: bool) -> None:
            if not success:
                log("Final flush unsuccessful.")
            self.client.disable_tracing()

        self.client.flush(0, flushed)

    # Consumer, on the IPC thread.

    def on_connect(self) -> None:
        self._connected = True
        mask = 0
        if self.notify_fd >= 0 or _BackgroundPipe.fd >= 0:
            mask |= ObservableEvents.TYPE_ALL_DATA_SOURCES_STARTED
        if self._snapshot_mode:
            mask |= ObservableEvents.TYPE_CLONE_TRIGGER_HIT
        if mask:
            self.client.observe_events(mask)
        if self.query:
            self.client.query_service_state(False, self._on_service_state)
            return
        if self.attach_key is not None:
            self.client.attach(self.attach_key)
            return
        if self.clone_tsid is not None or self.clone_name is not None:
            output_fd = self.output.fd if self.output is not None else None
            self.client.clone_session(
                self._on_session_cloned,
                session_id=self.clone_tsid or 0,
                unique_session_name=self.clone_name or "",
                output_fd=output_fd,
            )
            return
        config = self.config
        assert config is not None
        seconds = (self.expected_duration_ms + 999) // 1000
        if seconds:
            log(f"Connected to the Perfetto traced service, TTL: {seconds}s")
        else:
            log("Connected to the Perfetto traced service, starting tracing")
        output_fd = None
        if config.write_into_file and not config.output_path and self.output is not None:
            output_fd = self.output.fd
        self.client.enable_tracing(config, output_fd)
        self._started_at = time.monotonic()
        if self.detach_key is not None:
            self.client.detach(self.detach_key)

    @property
    def _snapshot_mode(self) -> bool:
        config = self.config
        return (
            config is not None
            and self.clone_tsid is None
            and self.clone_name is None
            and config.trigger_config.trigger_mode == TraceConfig.TriggerConfig.CLONE_SNAPSHOT
        )

    def _on_session_cloned(self, result: SessionCloned) -> None:
        if result.success:
            self.on_tracing_disabled("")
            return
        name = str(self.clone_tsid) if self.clone_tsid is not None else f'"{self.clone_name}"'
        self.on_tracing_disabled(f"Failed to clone tracing session {name}: {result.error}")

    def _take_snapshot(self, session_id: int) -> None:
        """Clones the session into OUT.N on a thread of its own (CLONE_SNAPSHOT triggers)."""
        if self.output is None or self.output.path == "-":
            log("CLONE_SNAPSHOT triggers need an --out file")
            return
        path = f"{self.output.path}.{len(self._snapshots)}"

        def snapshot() -> None:
            try:
                output = TraceOutput(path)
            except CliError as exc:
                log(str(exc))
                return
            try:
                SessionRunner(None, output, clone_tsid=session_id, stop_on_signals=False).run()
            finally:
                output.close()

        thread = threading.Thread(target=snapshot, name=f"snapshot-{len(self._snapshots)}")
        self._snapshots.append(thread)
        thread.start()

    def on_disconnect(self) -> None:
        if self._done.is_set():
            return
        if self._reading:
            self._fail(f"Disconnected from the traced service: {self._incomplete_trace()}")
            return
        if self._connected:
            log("Disconnected from the traced service")
        else:
            log(
                f"Could not connect to the traced socket {self.socket}. Ensure traced is "
                f"running or use tracebox. See {_DOC_URL}."
            )
        self._finish(1)

    def _on_service_state(self, success: bool, state: TracingServiceState) -> None:
        if not success:
            log("Failed to query the service state")
            self._finish(1)
            return
        if self.query_raw:
            sys.stdout.buffer.write(state.SerializeToString())
            sys.stdout.buffer.flush()
        else:
            sys.stdout.write(format_service_state(state, long=self.query_long))
            sys.stdout.flush()
        self._finish(0)

    def on_tracing_disabled(self, error: str) -> None:
        if self._done.is_set():  # e.g. detached: closing the connection ends the reply
            return
        if error:
            log(f"Service error: {error}")
            if self.output is not None:
                self.output.remove_if_empty()
            # Upstream exits 0 here too: such errors (e.g. a duplicate session name) are soft,
            # unless part of a trace was written: that trace is incomplete.
            partial = error.startswith(TRACE_FILE_WRITE_FAILED) or self._output_size()
            self._finish(1 if partial else 0)
            return
        config = self.config
        if config is not None and config.write_into_file:
            self._finalize()
            return
        self._reading = True
        self._last_data = time.monotonic()
        self.client.read_buffers()

    def on_trace_data(self, packets: Sequence[TracePacketSlices], has_more: bool) -> None:
        if self._final_stats_deadline:  # the trace was ended (a write failed)
            return
        self._last_data = time.monotonic()
        if self.output is not None:
            self._writing = True
            try:
                self.output.write_packets(packets)
            except OSError as exc:
                self._fail(
                    f"Failed to write packets into {self.output.display_name}: {exc.strerror}; "
                    f"{self._incomplete_trace()}"
                )
                return
            finally:
                self._writing = False
                self._last_data = time.monotonic()
        if not has_more:
            self._finalize()

    def _output_size(self) -> int:
        """Bytes of trace in the output so far (the service's file too), 0 if none."""
        if self.output is not None:
            return self.output.size()
        config = self.config
        if config is not None and config.output_path:
            with contextlib.suppress(OSError):
                return os.path.getsize(config.output_path)
        return 0

    def _incomplete_trace(self) -> str:
        if self.output is None:
            return "the trace is incomplete"
        return (
            f"the trace is incomplete ({self.output.size()} bytes of whole packets in "
            f"{self.output.display_name})"
        )

    def _fail(self, message: str) -> None:
        """Ends a read that could not complete: one line, exit status 1."""
        if self._done.is_set():
            return
        self._reading = False
        if self._progress is not None:
            self._progress.clear()
        log(message)
        self._finish(1)

    def _finalize(self, stats: TraceStats | None = None) -> None:
        """Ends the session's trace; first asks for its TraceStats, to say what was lost."""
        if self._done.is_set():
            return
        self._reading = False
        if not self._final_stats_deadline:
            self._final_stats_deadline = time.monotonic() + _FINAL_STATS_TIMEOUT_S
            self.client.get_trace_stats()
            return
        self._final_stats_deadline = -1.0
        if self._progress is not None:
            self._progress.clear()
        config = self.config
        if config is not None and config.write_into_file:
            log("Trace written into the output file")
        elif self.output is not None:
            log(f"Wrote {self.output.size()} bytes into {self.output.display_name}")
        lost = loss_line(stats) if stats is not None else ""
        if lost:
            log(lost)
        self._finish(0)

    def on_detach(self, success: bool) -> None:
        if not success:
            log("Session detach failed")
            self._finish(1)
            return
        self._finish(0)

    def on_attach(self, success: bool, config: TraceConfig) -> None:
        if not success:
            if not self.is_detached:
                log("Session re-attach failed. Check service logs for details")
            self._finish(EXIT_NOT_DETACHED)
            return
        if self.is_detached:
            assert self.attach_key is not None
            self.client.detach(self.attach_key)
            return
        self.config = config
        self._started_at = time.monotonic()
        if self.stop_once_attached:
            self._flush_and_disable()

    def on_trace_stats(self, success: bool, stats: TraceStats) -> None:
        if self._final_stats_deadline > 0:
            if not success:
                log("Failed to get the trace stats: data lost unknown")
            self._finalize(stats if success else None)
        elif success:
            self._buffer_bytes = sum(b.bytes_written for b in stats.buffer_stats)

    def on_observable_events(self, events: ObservableEvents) -> None:
        if events.HasField("clone_trigger_hit") and self._snapshot_mode:
            self._take_snapshot(events.clone_trigger_hit.tracing_session_id)
        if events.all_data_sources_started:
            self.notify_fd = _notify(self.notify_fd, _WAIT_OK)
            _BackgroundPipe.fd = _notify(_BackgroundPipe.fd, _WAIT_OK)
