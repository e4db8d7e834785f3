"""Where batches go: streamed into a trace file, or kept in a ring (flight recorder).

This is the one module that knows how packets leave the process; the rest of the tracer
hands it self-contained batches (see `_packets.py`).
"""

from __future__ import annotations

import _thread
import collections
import contextlib
import os
import threading
import time
from typing import Protocol


class SinkStats:
    """What reached the file and what did not.

    `max_bytes` > 0 caps the file's size, as upstream's `max_file_size_bytes`: the first
    batch (or appended part) that would take the file past it, and everything after it, is
    not written but counted in `events_lost` and `bytes_dropped` (see `admit`). `cut_after_s`
    is the seconds from the sink's start (`started`) to the batch the cap cut, once it cut.
    """

    __slots__ = (
        "bytes_dropped",
        "bytes_written",
        "cut_after_s",
        "events_lost",
        "events_written",
        "lost_reason",
        "max_bytes",
        "path",
        "started",
    )

    def __init__(self, path: str, max_bytes: int = 0, started: float | None = None) -> None:
        self.path = path
        self.bytes_written = 0
        self.events_written = 0
        self.events_lost = 0
        self.lost_reason = ""
        self.max_bytes = max_bytes
        self.bytes_dropped = 0
        self.cut_after_s: float | None = None
        self.started = time.monotonic() if started is None else started

    def admit(self, size: int, events: int) -> bool:
        """True when `size` more bytes keep the file within the cap: the caller writes them
        and counts them. Else they (holding `events` events) are counted dropped here, and
        so is everything offered after them: the file ends at a whole batch."""
        if self.cut_after_s is None and (
            not self.max_bytes or self.bytes_written + size <= self.max_bytes
        ):
            return True
        if self.cut_after_s is None:
            self.cut_after_s = time.monotonic() - self.started
        self.bytes_dropped += size
        self.events_lost += events
        return False

    def cut(self) -> str:
        """What the cap cut, as the summary says it ("" when it cut nothing)."""
        if self.cut_after_s is None:
            return ""
        return (
            f"the size cap of {self.max_bytes / (1 << 20):g} MiB was reached "
            f"{self.cut_after_s:.3f} s in: {_mib(self.bytes_dropped)} not written; "
            "the trace is partial"
        )


def _mib(n: int) -> str:
    return f"{n / (1 << 20):,.1f} MiB"


class Sink(Protocol):
    """Where an engine's batches go: `FileSink`, or `_system_sink.SystemSink` (--system)."""

    stats: SinkStats

    @property
    def ring(self) -> bool:
        """True when only the newest batches are kept."""

    def write(self, data: bytes, events: int) -> bool:
        """Takes one batch holding `events` events; False when it is dropped whole (counted)."""

    def dump(self, path: str) -> int:
        """Writes a snapshot to `path`; returns its size."""

    def close(self) -> SinkStats:
        """Finishes: what was written and lost."""


class FileSink:
    """Writes batches to `path` as they arrive; with `ring_bytes` keeps only the newest ones.

    With `max_bytes` > 0 the file (header included) grows to at most that many bytes (see
    `SinkStats.admit`); a ring is bounded by `ring_bytes` instead.
    """

    def __init__(self, path: str, header: bytes, ring_bytes: int = 0, max_bytes: int = 0) -> None:
        self.stats = SinkStats(path, max_bytes=0 if ring_bytes else max_bytes)
        self._header = header
        self._ring_bytes = ring_bytes
        self._ring: collections.deque[tuple[bytes, int]] = collections.deque()
        self._ring_size = 0
        # Reentrant: a signal handler in the main thread may ask for a snapshot (a dump) while
        # that thread is inside `write`.
        self._lock = threading.RLock()
        self._file = None if ring_bytes else open(path, "wb")  # noqa: SIM115
        self._unwritten_header = self._file is not None  # written with the first batch
        self._failed = False

    @property
    def ring(self) -> bool:
        """True when only the newest batches are kept."""
        return bool(self._ring_bytes)

    def write(self, data: bytes, events: int) -> bool:
        """Takes one batch holding `events` events; False when it is not written (counted in
        `stats`: the size cap, or an earlier write error).

        Raises OSError when the file cannot take it: then this batch and every later one are
        counted lost. An exception that a signal handler raises meanwhile (KeyboardInterrupt,
        SystemExit) is raised once the batch is written.
        """
        with self._lock:
            if self._failed:
                self.stats.events_lost += events
                return False
            if self._file is not None:
                header = len(self._header) if self._unwritten_header else 0
                if not self.stats.admit(header + len(data), events):
                    return False
                try:
                    interrupted = self._append_header()
                except OSError:
                    self.stats.events_lost += events
                    raise
                interrupted = self._append(data, events) or interrupted
                if interrupted is not None:
                    raise interrupted
                return True
            self._ring.append((data, events))
            self._ring_size += len(data)
            while self._ring_size > self._ring_bytes and len(self._ring) > 1:
                old, old_events = self._ring.popleft()
                self._ring_size -= len(old)
                self.stats.events_lost += old_events
                self.stats.lost_reason = "older than the ring buffer keeps"
            return True

    def _append_header(self) -> BaseException | None:
        if not self._unwritten_header:
            return None
        self._unwritten_header = False
        if self.stats.cut_after_s is not None:  # the cap cut before the first batch
            return None
        return self._append(self._header)

    def _append(self, data: bytes, events: int = 0) -> BaseException | None:
        """Writes all of `data` at the end of the file; returns what interrupted it, if anything.

        On OSError the file is cut back to its last whole batch and closed.
        """
        assert self._file is not None
        fd = self._file.fileno()
        if threading.current_thread() is threading.main_thread():
            error, interrupted = _write_aside(fd, data)
        else:  # Python runs signal handlers in the main thread only
            error, interrupted = _write_all(fd, data), None
        if error is not None:
            self._failed = True
            self.stats.events_lost += events
            with contextlib.suppress(OSError):
                os.ftruncate(fd, self.stats.bytes_written)
            self._file.close()
            self._file = None
            raise error
        self.stats.bytes_written += len(data)
        self.stats.events_written += events
        return interrupted

    def dump(self, path: str) -> int:
        """Writes the header and the batches the ring holds to `path`, whole or not at all (an
        OSError leaves no file); returns its size."""
        with self._lock:
            parts = [self._header, *(data for data, _ in self._ring)]
        tmp = f"{path}.tmp{os.getpid()}"
        try:
            with open(tmp, "wb") as f:
                for part in parts:
                    f.write(part)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        return sum(len(p) for p in parts)

    def close(self) -> SinkStats:
        """Finishes the file (a ring is written out now)."""
        with self._lock:
            if self._file is not None:
                try:
                    interrupted = self._append_header()
                finally:
                    if self._file is not None:
                        self._file.close()
                        self._file = None
                if interrupted is not None:
                    raise interrupted
                return self.stats
            if self._failed:
                return self.stats
        if self._ring_bytes:
            self.stats.bytes_written = self.dump(self.stats.path)
            self.stats.events_written = sum(events for _, events in self._ring)
            self._ring.clear()
        return self.stats


def _write_all(fd: int, data: bytes) -> OSError | None:
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(fd, view) :]
    except OSError as exc:
        return exc
    return None


def _write_aside(fd: int, data: bytes) -> tuple[OSError | None, BaseException | None]:
    """`_write_all` on a helper thread, which signal handlers never interrupt.

    In the main thread, a signal handler that raises just after a partial write(2) would
    lose its count; there, the exception is kept and returned once all of `data` is written.
    """
    outcome: list[OSError | None] = []
    finished = _thread.allocate_lock()
    finished.acquire()

    def write() -> None:
        try:
            outcome.append(_write_all(fd, data))
        finally:
            finished.release()

    try:
        _thread.start_new_thread(write, ())  # a bare thread: not recorded
    except RuntimeError:  # no new threads at interpreter shutdown (atexit callbacks, 3.12)
        return _write_all(fd, data), None
    interrupted: BaseException | None = None
    while not outcome:
        try:
            finished.acquire(True, 1.0)
        except BaseException as exc:  # returned to the caller
            interrupted = exc
    return outcome[0], interrupted
