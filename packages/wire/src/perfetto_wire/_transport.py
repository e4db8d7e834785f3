"""A connected non-blocking socket driven by an asyncio loop, feeding a protocol core."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections import deque
from collections.abc import Callable, Sequence

from perfetto_wire._endpoint import FrameEndpoint
from perfetto_wire._framing import IPC_BUFFER_SIZE
from perfetto_wire._sockets import (
    FD_ANCILLARY_SIZE,
    TruncatedMessageError,
    fd_ancillary,
    fd_from_ancillary,
    send_with_fd,
)

__all__ = ["SocketTransport"]

_log = logging.getLogger("perfetto_wire")


DRAINED_BELOW = IPC_BUFFER_SIZE
"""`when_drained` callbacks run once fewer bytes than this wait in the queue."""


class _Outgoing:
    """A frame (or what is left of it) waiting for the socket, with its fd."""

    __slots__ = ("data", "fd")

    def __init__(self, data: memoryview, fd: int | None) -> None:
        self.data = data
        self.fd = fd


class SocketTransport:
    """Moves bytes between a connected socket and a `FrameEndpoint` on one event loop.

    Writes go straight to the socket when it has room and are queued otherwise, so a slow
    peer never blocks the loop. When the socket takes none of the queue for `send_timeout`
    seconds the connection is shut down: the timeout is per send, as upstream's, so a peer
    that keeps reading, however slowly, is never cut off. Senders that can wait pace
    themselves with `when_drained`. File descriptors are duplicated when queued, so callers
    may close theirs as soon as `send` returns.
    """

    __slots__ = (
        "_closed",
        "_deadline",
        "_drained_callbacks",
        "_endpoint",
        "_loop",
        "_on_closed",
        "_queue",
        "_queued",
        "_recv_into",
        "_recv_view",
        "_send_timeout",
        "_sock",
        "_timer",
        "can_pass_fds",
    )

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        sock: socket.socket,
        *,
        send_timeout: float | None,
        recv_buffer: memoryview | None = None,
        on_closed: Callable[[SocketTransport], None] | None = None,
    ) -> None:
        self._loop = loop
        self._sock = sock
        self._send_timeout = send_timeout
        self._recv_view = (
            recv_buffer if recv_buffer is not None else memoryview(bytearray(IPC_BUFFER_SIZE))
        )
        self._recv_into = [self._recv_view]
        self._on_closed = on_closed
        self._queue: deque[_Outgoing] = deque()
        self._queued = 0
        self._deadline = 0.0
        self._drained_callbacks: list[Callable[[], None]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._endpoint: FrameEndpoint | None = None
        self._closed = False
        self.can_pass_fds = sock.family == socket.AF_UNIX

    @property
    def socket(self) -> socket.socket:
        """The connected socket."""
        return self._sock

    @property
    def queued_bytes(self) -> int:
        """Bytes accepted by `send` that the socket has not taken yet."""
        return self._queued

    def when_drained(self, callback: Callable[[], None]) -> None:
        """Calls `callback` once fewer than `DRAINED_BELOW` bytes wait to be sent: at once if
        that is so already, else from the loop as the peer reads; never once closed."""
        if self._closed:
            return
        if self._queued < DRAINED_BELOW:
            callback()
            return
        self._drained_callbacks.append(callback)

    def start(self, endpoint: FrameEndpoint) -> None:
        """Starts feeding received bytes to `endpoint`."""
        self._endpoint = endpoint
        if not self._closed:
            self._loop.add_reader(self._sock.fileno(), self._on_readable)

    def send(self, data: bytes, fd: int | None = None) -> None:
        """Writes `data` (with `fd` on its first byte) now, or queues it."""
        if self._closed:
            return
        if fd is not None and not self.can_pass_fds:
            _log.warning("dropping an fd: %s sockets cannot carry file descriptors", self._family)
            fd = None
        if self._queue:
            self._enqueue(memoryview(data), fd)
            return
        try:
            sent = self._sock.send(data) if fd is None else send_with_fd(self._sock, data, fd)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError as exc:
            self.lose(f"send failed: {exc}")
            return
        if sent < len(data):
            self._enqueue(memoryview(data)[sent:], fd if sent == 0 else None)

    def send_parts(self, parts: Sequence[bytes], fd: int | None = None) -> None:
        """Writes the concatenation of `parts` (with `fd` on its first byte) without joining
        them: one `sendmsg` now, the rest queued."""
        if self._closed:
            return
        if fd is not None and not self.can_pass_fds:
            _log.warning("dropping an fd: %s sockets cannot carry file descriptors", self._family)
            fd = None
        sent = 0
        if not self._queue:
            try:
                if fd is None:
                    sent = self._sock.sendmsg(parts)
                else:
                    sent = self._sock.sendmsg(parts, fd_ancillary(fd))
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError as exc:
                self.lose(f"send failed: {exc}")
                return
        if sent:
            fd = None
        for part in parts:
            size = len(part)
            if sent >= size:
                sent -= size
                continue
            self._enqueue(memoryview(part)[sent:], fd)
            fd = None
            sent = 0

    def close(self) -> None:
        """Shuts the socket down without notifying the endpoint (it asked for this)."""
        if self._teardown():
            self._notify_closed()

    def _teardown(self) -> bool:
        if self._closed:
            return False
        self._closed = True
        fileno = self._sock.fileno()
        if fileno >= 0:
            self._loop.remove_reader(fileno)
            self._loop.remove_writer(fileno)
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._drained_callbacks.clear()
        self._queued = 0
        while self._queue:
            item = self._queue.popleft()
            if item.fd is not None:
                os.close(item.fd)
        return True

    def _notify_closed(self) -> None:
        if self._on_closed is not None:
            self._on_closed(self)

    @property
    def _family(self) -> str:
        return socket.AddressFamily(self._sock.family).name

    def lose(self, reason: str) -> None:
        """Tears the connection down from this side and tells the endpoint it is gone."""
        if not self._teardown():
            return
        _log.debug("IPC connection lost: %s", reason)
        if self._endpoint is not None:
            self._endpoint.connection_lost()
        self._notify_closed()

    def _enqueue(self, data: memoryview, fd: int | None) -> None:
        owned_fd = os.dup(fd) if fd is not None else None
        self._queue.append(_Outgoing(data, owned_fd))
        self._queued += len(data)
        if len(self._queue) == 1:
            self._loop.add_writer(self._sock.fileno(), self._on_writable)
            self._progressed()

    def _progressed(self) -> None:
        """The socket took bytes (or the queue just began): the send timeout starts again."""
        if self._send_timeout is None:
            return
        self._deadline = self._loop.time() + self._send_timeout
        if self._timer is None:
            self._timer = self._loop.call_at(self._deadline, self._on_send_timeout)

    def _on_send_timeout(self) -> None:
        self._timer = None
        if not self._queue:
            return
        if self._loop.time() < self._deadline:
            self._timer = self._loop.call_at(self._deadline, self._on_send_timeout)
            return
        _log.warning(
            "IPC send timed out: the peer read nothing for %.3f s, %d bytes queued; "
            "closing the connection",
            self._send_timeout or 0.0,
            self.queued_bytes,
        )
        self.lose("send timeout")

    def _on_writable(self) -> None:
        queue = self._queue
        taken = 0
        while queue:
            item = queue[0]
            try:
                if item.fd is None:
                    sent = self._sock.send(item.data)
                else:
                    sent = send_with_fd(self._sock, item.data, item.fd)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:
                self.lose(f"send failed: {exc}")
                return
            if sent and item.fd is not None:
                os.close(item.fd)
                item.fd = None
            taken += sent
            if sent < len(item.data):
                item.data = item.data[sent:]
                break
            queue.popleft()
        self._queued -= taken
        if not queue:
            self._loop.remove_writer(self._sock.fileno())
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
        elif taken:
            self._progressed()
        if self._drained_callbacks and self._queued < DRAINED_BELOW:
            callbacks, self._drained_callbacks = self._drained_callbacks, []
            for callback in callbacks:
                callback()

    def _on_readable(self) -> None:
        try:
            nbytes, ancdata, flags, _ = self._sock.recvmsg_into(self._recv_into, FD_ANCILLARY_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self.lose(f"receive failed: {exc}")
            return
        fd = None
        if ancdata:
            try:
                fd = fd_from_ancillary(ancdata, flags)
            except TruncatedMessageError as exc:
                self.lose(str(exc))
                return
        if nbytes == 0:
            if fd is not None:
                os.close(fd)
            self.lose("peer closed the connection")
            return
        endpoint = self._endpoint
        if endpoint is not None:
            endpoint.receive_data(self._recv_view[:nbytes], fd)
        elif fd is not None:
            os.close(fd)
