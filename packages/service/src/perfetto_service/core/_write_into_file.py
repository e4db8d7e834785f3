"""Writing a session's packets into its trace file (TraceConfig.write_into_file)."""

from __future__ import annotations

import contextlib
import os

from protozero import read_varint

from perfetto_service._errors import ServiceError

DEFAULT_WRITE_PERIOD_MS = 5000
"""file_write_period_ms when the config leaves it 0."""
MIN_WRITE_PERIOD_MS = 100
"""The shortest file_write_period_ms the service honours."""


def create_trace_file(path: str) -> int:
    """Creates `path` (which must not exist) for a trace; returns its descriptor."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except OSError as e:
        raise ServiceError(f"Failed to create the trace file {path}: {e.strerror}") from e
    os.fchmod(fd, 0o644)
    return fd


def write_period_ms(configured_ms: int) -> int:
    """The drain period the service uses for a configured file_write_period_ms."""
    return max(configured_ms or DEFAULT_WRITE_PERIOD_MS, MIN_WRITE_PERIOD_MS)


class TraceFileWriter:
    """Appends packets to a trace file descriptor it owns, up to `max_size` bytes (0 = no limit).

    Each packet is written as a `Trace.packet` field, exactly as ReadBuffers streams it.
    """

    def __init__(self, fd: int, max_size: int = 0) -> None:
        self._fd = fd
        self._max_size = max_size
        self.bytes_written = 0

    @property
    def closed(self) -> bool:
        """Whether the file was closed."""
        return self._fd < 0

    def write(self, trace: bytes) -> bool:
        """Appends `trace` (whole framed packets); True when writing must stop.

        Writing stops at the size limit or on a write error. Like upstream, the packet that
        would bring the file to `max_size` bytes or more is not written, nor any after it.
        """
        if self._fd < 0:
            return True
        stop = False
        if self._max_size and self.bytes_written + len(trace) >= self._max_size:
            trace = trace[: _whole_packets_below(trace, self._max_size - self.bytes_written)]
            stop = True
        view = memoryview(trace)
        while view:
            try:
                written = os.write(self._fd, view)
            except OSError:
                return True
            self.bytes_written += written
            view = view[written:]
        return stop

    def close(self) -> None:
        """Syncs and closes the file."""
        if self._fd < 0:
            return
        with contextlib.suppress(OSError):
            os.fsync(self._fd)
        os.close(self._fd)
        self._fd = -1


def _whole_packets_below(trace: bytes, room: int) -> int:
    """The length of the longest run of whole `Trace.packet` fields of `trace` below `room`."""
    pos = 0
    end = len(trace)
    while pos < end:
        length, cursor = read_varint(trace, pos + 1, end)
        if cursor < 0 or cursor + length >= room:
            return pos
        pos = cursor + length
    return pos
