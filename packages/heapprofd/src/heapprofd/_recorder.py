"""A consumer that records one tracing session into a trace file (for `heap_profile`)."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from perfetto_protos.common.observable_events_pb2 import ObservableEvents
from perfetto_protos.common.trace_stats_pb2 import TraceStats
from perfetto_protos.config.trace_config_pb2 import TraceConfig
from perfetto_service import ConsumerIPCClient, TracePacketSlices, trace_file_bytes

from heapprofd._errors import HeapprofdError

__all__ = ["Recorder"]


class Recorder:
    """Enables a session on traced's consumer socket, then stops it and collects the trace."""

    def __init__(self, consumer_socket: str) -> None:
        self._connected = threading.Event()
        self._started = threading.Event()
        self._disabled = threading.Event()
        self._read_done = threading.Event()
        self._lost = False
        self.error = ""
        self._chunks: list[bytes] = []
        self._client = ConsumerIPCClient(consumer_socket, self)
        self._client.connect()

    def start(self, config: TraceConfig, timeout_s: float = 30.0) -> None:
        """Enables the session and waits until all its data sources have started."""
        if not self._connected.wait(timeout_s) or self._lost:
            raise HeapprofdError("cannot connect to the tracing service")
        self._client.observe_events(ObservableEvents.TYPE_ALL_DATA_SOURCES_STARTED)
        self._client.enable_tracing(config)
        if not self._started.wait(timeout_s) or self._lost:
            raise HeapprofdError(f"the session did not start {self.error}".strip())

    def stop(self, timeout_s: float = 30.0) -> bytes:
        """Stops the session and returns the trace file's bytes."""
        self._client.disable_tracing()
        if not self._disabled.wait(timeout_s):
            raise HeapprofdError("the tracing service did not stop the session")
        self._client.read_buffers()
        if not self._read_done.wait(timeout_s):
            raise HeapprofdError("the tracing service did not return the trace")
        return b"".join(self._chunks)

    def close(self) -> None:
        self._client.disconnect()

    # perfetto_service.Consumer, on the client's IPC thread.

    def on_connect(self) -> None:
        self._connected.set()

    def on_disconnect(self) -> None:
        self._lost = True
        self._connected.set()
        self._started.set()
        self._disabled.set()
        self._read_done.set()

    def on_tracing_disabled(self, error: str) -> None:
        self.error = error
        self._disabled.set()
        self._started.set()

    def on_trace_data(self, packets: Sequence[TracePacketSlices], has_more: bool) -> None:
        self._chunks.append(bytes(trace_file_bytes(packets)))
        if not has_more:
            self._read_done.set()

    def on_detach(self, success: bool) -> None:
        pass

    def on_attach(self, success: bool, config: TraceConfig) -> None:
        pass

    def on_trace_stats(self, success: bool, stats: TraceStats) -> None:
        pass

    def on_observable_events(self, events: ObservableEvents) -> None:
        if events.all_data_sources_started:
            self._started.set()
