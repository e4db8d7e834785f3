"""Writing a session's packets into its trace file (TraceConfig.write_into_file)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import time

from protozero import read_varint

from perfetto_service._errors import ServiceError

DEFAULT_WRITE_PERIOD_MS = 5000
"""file_write_period_ms when the config leaves it 0."""
MIN_WRITE_PERIOD_MS = 100
"""The shortest file_write_period_ms the service honours."""
TRACE_FILE_WRITE_FAILED = "Failed to write the trace file"
"""How the error of a session whose trace file could not be written completely begins."""
WRITE_RETRY_MS = 10
"""How soon a pipe whose reader is behind is written to again."""
PIPE_SIZE = 1024 * 1024
"""The capacity asked for a pipe written into (Linux's default limit for unprivileged users)."""


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

    Each packet is written as a `Trace.packet` field, exactly as ReadBuffers streams it. A
    pipe, FIFO or socket is written without blocking: what its reader has not taken yet waits
    in `pending` (call `write_pending` again later). A regular file is written at once.
    After a write error, `error` says what failed and a regular file is cut back to its last
    whole packet.
    """

    def __init__(self, fd: int, max_size: int = 0, path: str = "") -> None:
        self._fd = fd
        self._max_size = max_size
        self.path = path or _fd_path(fd)
        self.bytes_written = 0
        self.error = ""
        self._stopping = False
        self._pending = memoryview(b"")
        self._pending_start = 0
        self.retry_scheduled = False
        """Whether the service will call `write_pending` again soon (set and reset by it)."""
        self._last_progress = time.monotonic()
        self._regular = stat.S_ISREG(os.fstat(fd).st_mode)
        if not self._regular:
            self._fd = _non_blocking(fd)

    @property
    def closed(self) -> bool:
        """Whether the file was closed."""
        return self._fd < 0

    @property
    def pending(self) -> int:
        """Bytes accepted by `write` that the file's reader has not taken yet."""
        return len(self._pending)

    @property
    def done(self) -> bool:
        """Whether writing has ended: the size limit reached and written, or an error."""
        return bool(self.error) or (self._stopping and not self._pending) or self._fd < 0

    def idle_seconds(self) -> float:
        """Seconds since the file last took bytes, or since pending bytes began to wait."""
        return time.monotonic() - self._last_progress

    def write(self, trace: bytes) -> None:
        """Appends `trace` (whole framed packets) after what is pending.

        Like upstream, the packet that would bring the file to `max_size` bytes or more is
        not written, nor any after it.
        """
        if self.done or self._stopping:
            return
        queued = self.bytes_written + len(self._pending)
        if self._max_size and queued + len(trace) >= self._max_size:
            trace = trace[: _whole_packets_below(trace, self._max_size - queued)]
            self._stopping = True
        if self._pending:
            self._pending = memoryview(bytes(self._pending) + trace)
        else:
            self._pending = memoryview(trace)
            self._pending_start = self.bytes_written
            self._last_progress = time.monotonic()
        self.write_pending()

    def write_pending(self) -> bool:
        """Writes what the file takes of `pending` without blocking; True if it took any."""
        taken = 0
        view = self._pending
        while view and self._fd >= 0:
            try:
                written = os.write(self._fd, view)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as e:
                self._fail(e)
                return bool(taken)
            taken += written
            self.bytes_written += written
            view = view[written:]
        self._pending = view
        if not view:
            self._pending_start = self.bytes_written
        if taken:
            self._last_progress = time.monotonic()
        return bool(taken)

    def fail(self, message: str) -> None:
        """Stops writing with `message` as the error."""
        if not self.error:
            self.error = message
        self._pending = memoryview(b"")

    def _fail(self, e: OSError) -> None:
        written = self.bytes_written - self._pending_start
        if self._regular and written:
            # The last packet must be whole: cut the file back to the last one written whole.
            keep = self._pending_start + _whole_packets_below(self._pending, written + 1)
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, keep)
                self.bytes_written = keep
        self.fail(f"{TRACE_FILE_WRITE_FAILED} {self.path}: {e.strerror or e}")

    def close(self) -> None:
        """Syncs and closes the file (what is still pending is dropped)."""
        if self._fd < 0:
            return
        if self._regular:
            with contextlib.suppress(OSError):
                os.fsync(self._fd)
        os.close(self._fd)
        self._fd = -1
        self._pending = memoryview(b"")


def _non_blocking(fd: int) -> int:
    """A non-blocking descriptor of the pipe or socket `fd`, which it replaces.

    A pipe is opened anew so that the descriptions others share with `fd` stay blocking, and
    given room for `PIPE_SIZE` bytes where the system allows, so that a fast reader is not
    held back by the retries.
    """
    if stat.S_ISFIFO(os.fstat(fd).st_mode):
        with contextlib.suppress(OSError):
            fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_SIZE)
    try:
        private = os.open(f"/proc/self/fd/{fd}", os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        os.set_blocking(fd, False)
        return fd
    os.close(fd)
    return private


def _fd_path(fd: int) -> str:
    """What the file descriptor `fd` refers to, as the kernel names it."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return f"fd {fd}"


def _whole_packets_below(trace: bytes | memoryview, room: int) -> int:
    """The length of the longest run of whole `Trace.packet` fields of `trace` below `room`."""
    pos = 0
    end = len(trace)
    while pos < end:
        length, cursor = read_varint(trace, pos + 1, end)
        if cursor < 0 or cursor + length >= room:
            return pos
        pos = cursor + length
    return pos
