"""What the host and client protocol cores share: a transport, frame decoding, fd routing."""

from __future__ import annotations

import logging
import os
from abc import ABC, abstractmethod
from typing import Protocol

from perfetto_protos.ipc.wire_protocol_pb2 import IPCFrame

from perfetto_wire._framing import Buffer, FrameDecoder, FrameTooLargeError

__all__ = ["FrameEndpoint", "Transport"]

_log = logging.getLogger("perfetto_wire")


class Transport(Protocol):
    """Where a protocol core writes its bytes. Socket adapters implement it; tests fake it."""

    def send(self, data: bytes, fd: int | None = None) -> None:
        """Queues `data` for the peer; `fd` (kept open by the caller) goes with its first byte."""

    def close(self) -> None:
        """Shuts the connection down; the adapter reports the loss back with `connection_lost`."""


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

    __slots__ = ("_closed", "_decoder", "_fd_for_next", "_transport")

    def __init__(self, transport: Transport) -> None:
        self._transport = transport
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
            frames = self._decoder.feed(data)
        except FrameTooLargeError as exc:
            if fd is not None:
                close_fd(fd)
            self.abort(str(exc))
            return
        if fd is None and self._fd_for_next is None:
            for frame in frames:
                self._on_frame(frame, None)
                if self.closed:
                    return
            return
        self._route_with_fds(frames, fd)

    def _route_with_fds(self, frames: list[IPCFrame], fd: int | None) -> None:
        first_fd: int | None = None
        if frames and self._fd_for_next is not None:
            first_fd, self._fd_for_next = self._fd_for_next, None
        last_fd: int | None = None
        if fd is not None:
            if self._decoder.buffered:
                if self._fd_for_next is not None:
                    close_fd(self._fd_for_next)
                self._fd_for_next = fd
            elif frames:
                last_fd = fd
            else:
                self._on_stray_fd(fd)
        count = len(frames)
        for index, frame in enumerate(frames):
            frame_fd = first_fd if index == 0 else None
            if index == count - 1 and last_fd is not None:
                if frame_fd is not None:
                    self._on_stray_fd(frame_fd)
                frame_fd = last_fd
            if self._closed:
                if frame_fd is not None:
                    close_fd(frame_fd)
                continue
            self._on_frame(frame, frame_fd)

    def connection_lost(self) -> None:
        """Tells the core the socket is gone. Idempotent."""
        if self._closed:
            return
        self._closed = True
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

    @abstractmethod
    def _on_frame(self, frame: IPCFrame, fd: int | None) -> None:
        """Handles one decoded frame and the fd that came with it (now owned by the callee)."""

    @abstractmethod
    def _on_stray_fd(self, fd: int) -> None:
        """Takes an fd that arrived with no frame to go with."""

    @abstractmethod
    def _on_closed(self) -> None:
        """Releases everything tied to the connection, once."""
