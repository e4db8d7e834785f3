"""What the host and client protocol cores share: a transport, frame decoding, fd routing."""

from __future__ import annotations

import logging
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Protocol

from perfetto_protos.ipc.wire_protocol_pb2 import IPCFrame

from perfetto_wire._framing import Buffer, FrameDecoder, FrameTooLargeError, parse_frame

__all__ = ["FrameEndpoint", "Transport"]

_log = logging.getLogger("perfetto_wire")

GATHER_MIN_PAYLOAD = 16384
"""Payloads from this size on are written after their header instead of copied behind it."""


class Transport(Protocol):
    """Where a protocol core writes its bytes. Socket adapters implement it; tests fake it."""

    def send(self, data: bytes, fd: int | None = None) -> None:
        """Queues `data` for the peer; `fd` (kept open by the caller) goes with its first byte."""

    def close(self) -> None:
        """Shuts the connection down; the adapter reports the loss back with `connection_lost`.

        A transport that can write several buffers at once may also offer
        `send_parts(parts: Sequence[bytes], fd: int | None) -> None`, which sends their
        concatenation like `send`; large replies then go out without being joined first.
        One that queues may offer `when_drained(callback: Callable[[], None]) -> None`, which
        calls `callback` once most of the queue has reached the peer.
        """


def close_fd(fd: int) -> None:
    """Closes a received file descriptor nobody claimed."""
    try:
        os.close(fd)
    except OSError as exc:
        _log.debug("closing received fd %d: %s", fd, exc)


class FrameEndpoint(ABC):
    """One end of a connection: decodes incoming bytes and hands frames on with their fd.

    A file descriptor travels with the first byte of the frame it belongs to, so it belongs to
    the last frame that begins in the bytes received along with it.
    """

    __slots__ = ("_closed", "_decoder", "_fd_for_next", "_send_parts", "_transport")

    def __init__(self, transport: Transport) -> None:
        self._transport = transport
        send_parts: Callable[[Sequence[bytes], int | None], None] | None = getattr(
            transport, "send_parts", None
        )
        self._send_parts = send_parts
        self._decoder = FrameDecoder()
        self._fd_for_next: int | None = None
        self._closed = False

    @property
    def closed(self) -> bool:
        """Whether the connection is gone (lost, or shut down by this side)."""
        return self._closed

    def receive_data(self, data: Buffer, fd: int | None = None) -> None:
        """Feeds bytes read from the socket and the file descriptor received with them, if any.

        The buffer is consumed before returning, so adapters may reuse it.
        """
        if self._closed:
            if fd is not None:
                close_fd(fd)
            return
        try:
            source, spans = self._decoder.split(data)
        except FrameTooLargeError as exc:
            if fd is not None:
                close_fd(fd)
            self.abort(str(exc))
            return
        if fd is None and self._fd_for_next is None:
            for start, end in spans:
                self._on_frame_bytes(source, start, end, None)
                if self.closed:
                    return
            return
        self._route_with_fds(source, spans, fd)

    def _route_with_fds(self, source: Buffer, spans: list[tuple[int, int]], fd: int | None) -> None:
        first_fd: int | None = None
        if spans and self._fd_for_next is not None:
            first_fd, self._fd_for_next = self._fd_for_next, None
        last_fd: int | None = None
        if fd is not None:
            if self._decoder.buffered:
                if self._fd_for_next is not None:
                    close_fd(self._fd_for_next)
                self._fd_for_next = fd
            elif spans:
                last_fd = fd
            else:
                self._on_stray_fd(fd)
        count = len(spans)
        for index, (start, end) in enumerate(spans):
            frame_fd = first_fd if index == 0 else None
            if index == count - 1 and last_fd is not None:
                if frame_fd is not None:
                    self._on_stray_fd(frame_fd)
                frame_fd = last_fd
            if self._closed:
                if frame_fd is not None:
                    close_fd(frame_fd)
                continue
            self._on_frame_bytes(source, start, end, frame_fd)

    def _on_frame_bytes(self, data: Buffer, start: int, end: int, fd: int | None) -> None:
        """Handles the serialized IPCFrame in `data[start:end]` and the fd that came with it.

        Cores override this to decode their hot frames by hand; anything else goes through
        protobuf to `_on_frame`. A frame that does not parse is dropped, its fd kept as stray.
        """
        frame = parse_frame(data, start, end)
        if frame is not None:
            self._on_frame(frame, fd)
        elif fd is not None:
            self._on_stray_fd(fd)

    def connection_lost(self) -> None:
        """Tells the core the socket is gone. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._decoder.release()
        if self._fd_for_next is not None:
            close_fd(self._fd_for_next)
            self._fd_for_next = None
        self._on_closed()

    def abort(self, reason: str) -> None:
        """Shuts the connection down from this side, logging why."""
        if self._closed:
            return
        _log.warning("closing IPC connection: %s", reason)
        self.connection_lost()
        self._transport.close()

    def _send(self, data: bytes, fd: int | None = None) -> None:
        if not self._closed:
            self._transport.send(data, fd)

    def _send_framed(self, header: bytes, payload: bytes, fd: int | None) -> None:
        """Sends `header` + `payload` as one write, joining them only when they are small."""
        if self._closed:
            return
        if self._send_parts is not None and len(payload) >= GATHER_MIN_PAYLOAD:
            self._send_parts((header, payload), fd)
        else:
            self._transport.send(header + payload, fd)

    def _send_all(self, parts: Sequence[bytes], fd: int | None) -> None:
        """Sends the concatenation of `parts` (framed already) as one write."""
        if self._closed:
            return
        if self._send_parts is not None:
            self._send_parts(parts, fd)
        else:
            self._transport.send(b"".join(parts), fd)

    @abstractmethod
    def _on_frame(self, frame: IPCFrame, fd: int | None) -> None:
        """Handles one decoded frame and the fd that came with it (now owned by the callee)."""

    @abstractmethod
    def _on_stray_fd(self, fd: int) -> None:
        """Takes an fd that arrived with no frame to go with."""

    @abstractmethod
    def _on_closed(self) -> None:
        """Releases everything tied to the connection, once."""
