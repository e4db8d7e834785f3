"""Where batches go: streamed into a trace file, or kept in a ring (flight recorder).

This is the one module that knows how packets leave the process; the rest of the tracer
hands it self-contained batches (see `_packets.py`).
"""

from __future__ import annotations

import collections
import dataclasses
import os
import threading
from typing import Protocol


@dataclasses.dataclass
class SinkStats:
    """What reached the file and what did not."""

    path: str
    bytes_written: int = 0
    events_written: int = 0
    events_lost: int = 0
    lost_reason: str = ""


class Sink(Protocol):
    """Where an engine's batches go: `FileSink`, or `_system_sink.SystemSink` (--system)."""

    stats: SinkStats

    @property
    def ring(self) -> bool:
        """True when only the newest batches are kept."""

    def write(self, data: bytes, events: int) -> None:
        """Takes one batch holding `events` events."""

    def dump(self, path: str) -> int:
        """Writes a snapshot to `path`; returns its size."""

    def close(self) -> SinkStats:
        """Finishes: what was written and lost."""


class FileSink:
    """Writes batches to `path` as they arrive; with `ring_bytes` keeps only the newest ones."""

    def __init__(self, path: str, header: bytes, ring_bytes: int = 0) -> None:
        self.stats = SinkStats(path)
        self._header = header
        self._ring_bytes = ring_bytes
        self._ring: collections.deque[tuple[bytes, int]] = collections.deque()
        self._ring_size = 0
        self._lock = threading.Lock()
        self._file = None if ring_bytes else open(path, "wb")  # noqa: SIM115
        if self._file is not None:
            self._file.write(header)
            self.stats.bytes_written = len(header)

    @property
    def ring(self) -> bool:
        """True when only the newest batches are kept."""
        return bool(self._ring_bytes)

    def write(self, data: bytes, events: int) -> None:
        """Takes one batch holding `events` events."""
        with self._lock:
            if self._file is not None:
                self._file.write(data)
                self.stats.bytes_written += len(data)
                self.stats.events_written += events
                return
            self._ring.append((data, events))
            self._ring_size += len(data)
            while self._ring_size > self._ring_bytes and len(self._ring) > 1:
                old, old_events = self._ring.popleft()
                self._ring_size -= len(old)
                self.stats.events_lost += old_events
                self.stats.lost_reason = "older than the ring buffer keeps"

    def add_header(self, data: bytes) -> None:
        """Descriptors that must survive the ring (written now, or at every dump)."""
        with self._lock:
            self._header += data
            if self._file is not None:
                self._file.write(data)
                self.stats.bytes_written += len(data)

    def dump(self, path: str) -> int:
        """Writes the header and the batches the ring holds to `path`; returns its size."""
        with self._lock:
            parts = [self._header, *(data for data, _ in self._ring)]
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "wb") as f:
            for part in parts:
                f.write(part)
        os.replace(tmp, path)
        return sum(len(p) for p in parts)

    def close(self) -> SinkStats:
        """Finishes the file (a ring is written out now)."""
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None
                return self.stats
        if self._ring_bytes:
            self.stats.bytes_written = self.dump(self.stats.path)
            self.stats.events_written = sum(events for _, events in self._ring)
            self._ring.clear()
        return self.stats
