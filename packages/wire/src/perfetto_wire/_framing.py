"""IPC framing: a little-endian uint32 payload length followed by one serialized IPCFrame."""

from __future__ import annotations

import logging
import struct
from typing import cast

from google.protobuf.message import DecodeError
from perfetto_protos.ipc.wire_protocol_pb2 import IPCFrame

from perfetto_wire._errors import WireError

__all__ = [
    "HEADER_SIZE",
    "IPC_BUFFER_SIZE",
    "MAX_PAYLOAD_SIZE",
    "FrameDecoder",
    "FrameTooLargeError",
    "encode_frame",
    "encode_payload",
    "parse_frame",
]

_log = logging.getLogger("perfetto_wire")

IPC_BUFFER_SIZE = 131072
"""Upper bound of a whole frame (header included), upstream's kIPCBufferSize."""

HEADER_SIZE = 4
"""Size of the length prefix in front of every frame."""

MAX_PAYLOAD_SIZE = IPC_BUFFER_SIZE - HEADER_SIZE
"""The largest serialized IPCFrame a peer may announce."""

Buffer = bytes | bytearray | memoryview

_HEADER = struct.Struct("<I")


class FrameTooLargeError(WireError):
    """A frame announces (or would need) more than the frame size limit."""

    def __init__(self, payload_size: int, limit: int = MAX_PAYLOAD_SIZE) -> None:
        super().__init__(f"IPC frame too large: {payload_size} payload bytes, limit {limit}")
        self.payload_size = payload_size
        self.limit = limit


def encode_payload(payload: bytes) -> bytes:
    """Prefixes an already serialized IPCFrame with its length."""
    size = len(payload)
    if size > MAX_PAYLOAD_SIZE:
        raise FrameTooLargeError(size)
    return size.to_bytes(4, "little") + payload


def encode_frame(frame: IPCFrame) -> bytes:
    """Serializes `frame` with its length prefix, ready to be written to a socket."""
    return encode_payload(frame.SerializeToString())


class FrameDecoder:
    """Reassembles IPCFrames from a byte stream cut at arbitrary points.

    Zero-length frames are skipped and frames that do not parse are dropped, like upstream.
    A length prefix above the limit raises `FrameTooLargeError`; the connection is then
    unusable and every later `feed` raises again.
    """

    __slots__ = ("_broken", "_buf", "_max_payload")

    def __init__(self, max_frame_size: int = IPC_BUFFER_SIZE) -> None:
        if max_frame_size <= HEADER_SIZE:
            raise WireError(f"max_frame_size must exceed {HEADER_SIZE}, got {max_frame_size}")
        self._max_payload = max_frame_size - HEADER_SIZE
        self._buf = bytearray()
        self._broken: FrameTooLargeError | None = None

    @property
    def buffered(self) -> int:
        """Bytes received that do not yet form a whole frame."""
        return len(self._buf)

    def feed(self, data: Buffer) -> list[IPCFrame]:
        """Consumes `data` and returns the frames it completes, in order."""
        source, spans = self.split(data)
        frames: list[IPCFrame] = []
        for start, end in spans:
            frame = parse_frame(source, start, end)
            if frame is not None:
                frames.append(frame)
        return frames

    def split(self, data: Buffer) -> tuple[Buffer, list[tuple[int, int]]]:
        """Consumes `data`; returns a buffer and the (start, end) of each frame it completes.

        The buffer is `data` itself or one the decoder no longer uses; the spans cover the
        serialized IPCFrames (length prefixes and zero-length frames left out).
        """
        if self._broken is not None:
            raise self._broken
        buf = self._buf
        if buf:
            buf += data
            source: Buffer = buf
        else:
            source = data
        total = len(source)
        if total > HEADER_SIZE:
            (size,) = _HEADER.unpack_from(source)
            if size == total - HEADER_SIZE and size <= self._max_payload:
                if buf:
                    self._buf = bytearray()
                return source, [(HEADER_SIZE, total)]
        spans: list[tuple[int, int]] = []
        pos = 0
        while total - pos >= HEADER_SIZE:
            (size,) = _HEADER.unpack_from(source, pos)
            if size > self._max_payload:
                self._buf = bytearray()
                self._broken = FrameTooLargeError(size, self._max_payload)
                raise self._broken
            end = pos + HEADER_SIZE + size
            if end > total:
                break
            if size:
                spans.append((pos + HEADER_SIZE, end))
            pos = end
        if source is buf:
            self._buf = buf[pos:] if pos < total else bytearray()
        elif pos < total:
            self._buf = bytearray(source[pos:])
        return source, spans


def parse_frame(data: Buffer, start: int, end: int) -> IPCFrame | None:
    """The IPCFrame serialized in `data[start:end]`, or None (logged) if it does not parse."""
    frame = IPCFrame()
    try:
        # protobuf parses any buffer; its stubs only name bytes.
        frame.ParseFromString(cast(bytes, data[start:end]))
    except DecodeError:
        _log.debug("dropping an IPC frame that does not parse (%d bytes)", end - start)
        return None
    return frame
