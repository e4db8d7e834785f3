"""Writing a session's packets into its trace file (TraceConfig.write_into_file)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence

from perfetto_service._errors import ServiceError
from perfetto_service._read_slicer import packet_preamble

DEFAULT_WRITE_PERIOD_MS = 5000
"""file_write_period_ms when the config leaves it 0."""
MIN_WRITE_PERIOD_MS = 100
"""The shortest file_write_period_ms the service honours."""

_IOV_MAX = 1024

Packet = Sequence[bytes | bytearray | memoryview]


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

    def write(self, packets: Sequence[Packet]) -> bool:
        """Writes `packets`; True when writing must stop (size limit reached or write error).

        Like upstream, the packet that would bring the file to `max_size` bytes or more is
        not written, and neither is anything after it.
        """
        if self._fd < 0:
            return True
        limit = self._max_size or (1 << 63)
        parts: list[bytes | bytearray | memoryview] = []
        pending = 0
        stop = False
        for packet in packets:
            size = sum(map(len, packet))
            preamble = packet_preamble(size)
            if self.bytes_written + pending + len(preamble) + size >= limit:
                stop = True
                break
            pending += len(preamble) + size
            parts.append(preamble)
            parts.extend(packet)
        for start in range(0, len(parts), _IOV_MAX):
            batch = parts[start : start + _IOV_MAX]
            try:
                written = os.writev(self._fd, batch)
            except OSError:
                return True
            self.bytes_written += written
            if written < sum(map(len, batch)):
                return True
        return stop

    def close(self) -> None:
        """Syncs and closes the file."""
        if self._fd < 0:
            return
        with contextlib.suppress(OSError):
            os.fsync(self._fd)
        os.close(self._fd)
        self._fd = -1
