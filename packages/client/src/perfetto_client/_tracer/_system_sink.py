"""--system: batches go to a running `traced`, through the client library's SYSTEM backend.

The program joins `traced` (ours or upstream's; `PERFETTO_PRODUCER_SOCK_NAME` or the
default socket) as the client library's producer, and every session of `traced` that runs
the `track_event` data source (with the `perfetto_trace` category enabled, as it is by
default) gets the calls. Batches are self-contained, so all of the process's threads share
one TraceWriter per session: each batch is written with `TraceWriter.write_packets`. When
the shared memory buffer stays full (the writer stalls first, then drops), a batch ends at
its first dropped packet and its events from there on are counted lost.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from perfetto_protos.trace.trace_packet_pbzero import TracePacket
from perfetto_service import producer_socket_names
from perfetto_smb import TraceWriter
from protozero import ProtoDecoder, encode_varint

from perfetto_client import _tracing
from perfetto_client._categories import category_enabled_by, registry
from perfetto_client._errors import TracingError
from perfetto_client._tracer._sink import SinkStats
from perfetto_client._track_event import StartupInstance, TrackEventInstance

CATEGORY = "perfetto_trace"
"""The category a session's TrackEventConfig can disable to leave the calls out."""
_CONNECT_TIMEOUT = 5.0
_SESSION_WAIT = 1.0  # at the end, for a session that is about to start the data source
_COMMIT_WAIT = 10.0  # at the end, for traced to take the last chunks
_MAX_PENDING = 16 << 20  # batches kept while connected but before any session started
_TRACK_EVENT = TracePacket.FIELD_TRACK_EVENT


def _is_event(packet: bytes) -> bool:
    """Whether a packet of a batch is one of its events (it holds a TrackEvent)."""
    return any(field.id == _TRACK_EVENT for field in ProtoDecoder(packet))


def _framed_size(packet: bytes) -> int:
    """The bytes a packet takes in a batch (a Trace.packet field)."""
    return 1 + len(encode_varint(len(packet))) + len(packet)


def socket_name() -> str:
    """The producer socket `--system` connects to."""
    return producer_socket_names()[0]


class SystemSink:
    """Writes batches into every running track_event session of the system's `traced`."""

    ring = False

    def __init__(self, header: bytes, split: Callable[[bytes], list[bytes]]) -> None:
        self.socket = socket_name()
        self.stats = SinkStats(f"traced at {self.socket}")
        self._header = split(header)
        self._split = split
        self._lock = threading.Lock()
        self._writers: dict[int, tuple[TrackEventInstance, TraceWriter]] = {}
        self._pending: list[tuple[bytes, int]] = []
        self._pending_size = 0
        self.connected = self._connect()

    def _connect(self) -> bool:
        if not _tracing.initialize_system_unless_missing():
            return False
        return _tracing.Tracing.wait_connected(_CONNECT_TIMEOUT)

    def _sessions(self) -> list[TraceWriter]:
        # The writers of the sessions running now (new ones get the process descriptor).
        live = [
            i
            for i in registry.instances
            if not isinstance(i, StartupInstance) and category_enabled_by(i.config, CATEGORY, ())
        ]
        for key in [k for k, (i, _) in self._writers.items() if i not in live]:
            self._writers.pop(key)[1].close()
        for instance in live:
            if id(instance) not in self._writers:
                try:
                    writer: Any = instance._create_trace_writer()
                    writer.write_packets(self._header)
                except Exception:
                    continue  # no buffer, or not a TraceWriter (the console interceptor)
                self._writers[id(instance)] = (instance, writer)
        return [w for _, w in self._writers.values()]

    def write(self, data: bytes, events: int) -> bool:
        """Takes one batch holding `events` events; False when it is dropped whole (counted)."""
        with self._lock:
            writers = self._sessions() if self.connected else []
            if not writers:
                if self.connected and self._pending_size + len(data) <= _MAX_PENDING:
                    self._pending.append((data, events))
                    self._pending_size += len(data)
                    return True
                self._lose(events)
                return False
            pending, self._pending, self._pending_size = self._pending, [], 0
            for batch, count in [*pending, (data, events)]:
                self._write_to(writers, batch, count)
            return True

    def _write_to(self, writers: list[TraceWriter], data: bytes, events: int) -> None:
        # A batch's packets depend on its first ones (incremental state): after a packet the
        # writer dropped, the rest of the batch stays out and counts as lost.
        # (With several sessions, what the one that lost most got.)
        packets = self._split(data)
        written = min([writer.write_packets(packets, stop_at_loss=True) for writer in writers])
        dropped = packets[written:]
        lost = sum(map(_is_event, dropped))
        self.stats.bytes_written += len(data) - sum(map(_framed_size, dropped))
        self.stats.events_written += events - lost
        if lost:
            self.stats.events_lost += lost
            self.stats.lost_reason = "traced's shared memory buffer was full"

    def _lose(self, events: int) -> None:
        self.stats.events_lost += events
        if not self.connected:
            self.stats.lost_reason = f"no tracing service at {self.socket}"
        else:
            self.stats.lost_reason = "no session of traced was recording track_event"

    def dump(self, path: str) -> int:
        """Snapshots are `traced`'s business (`perfetto --clone`)."""
        raise TracingError("--system records into traced: no flight recorder to snapshot")

    def close(self) -> SinkStats:
        """Writes what is pending and commits every writer's chunks to `traced`, waiting until
        it has them (the IPC thread dies with the process)."""
        deadline = time.monotonic() + _SESSION_WAIT
        while self._pending and time.monotonic() < deadline:
            with self._lock:
                if self._sessions():
                    break
            time.sleep(0.02)
        with self._lock:
            pending, self._pending, self._pending_size = self._pending, [], 0
            writers = self._sessions() if self.connected else []
            for data, events in pending:
                if writers:
                    self._write_to(writers, data, events)
                else:
                    self._lose(events)
            committed = [threading.Event() for _ in writers]
            for writer, event in zip(writers, committed, strict=True):
                writer.flush(event.set)
        deadline = time.monotonic() + _COMMIT_WAIT
        if not all(event.wait(max(0.0, deadline - time.monotonic())) for event in committed):
            self.stats.lost_reason = (
                f"traced did not confirm the last chunks within {_COMMIT_WAIT:g} s: "
                "events may be missing"
            )
        return self.stats
