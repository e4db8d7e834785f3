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
    "encode_invoke",
    "encode_invoke_reply",
    "encode_payload",
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


# The two frames on every call's path are written by hand: the same bytes protobuf would
# produce for an IPCFrame with these fields set, for a fraction of the cost.
_ONE_BYTE_VARINTS = [bytes((value,)) for value in range(0x80)]


def _varint(value: int) -> bytes:
    if value < 0x80:
        return _ONE_BYTE_VARINTS[value]
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _frame(request_id: int, member_tag: bytes, member: list[bytes], member_size: int) -> bytes:
    request = _varint(request_id)
    size_varint = _varint(member_size)
    payload_size = 1 + len(request) + 1 + len(size_varint) + member_size
    if payload_size > MAX_PAYLOAD_SIZE:
        raise FrameTooLargeError(payload_size)
    return b"".join(
        (payload_size.to_bytes(4, "little"), b"\x10", request, member_tag, size_varint, *member)
    )


def encode_invoke(
    request_id: int, service_id: int, method_id: int, args_proto: bytes, drop_reply: bool
) -> bytes:
    """An InvokeMethod frame, every field set like upstream's client sets them."""
    small = _ONE_BYTE_VARINTS
    service = small[service_id] if service_id < 0x80 else _varint(service_id)
    method = small[method_id] if method_id < 0x80 else _varint(method_id)
    args_length = len(args_proto)
    args_size = small[args_length] if args_length < 0x80 else _varint(args_length)
    member = [
        b"\x08",
        service,
        b"\x10",
        method,
        b"\x1a",
        args_size,
        args_proto,
        b"\x20\x01" if drop_reply else b"\x20\x00",
    ]
    size = 5 + len(service) + len(method) + len(args_size) + args_length
    return _frame(request_id, b"\x2a", member, size)


def encode_invoke_reply(request_id: int, has_more: bool, reply_proto: bytes) -> bytes:
    """A successful InvokeMethodReply frame (success, has_more and reply_proto set)."""
    reply_size = _varint(len(reply_proto))
    member = [
        b"\x08\x01\x10\x01\x1a" if has_more else b"\x08\x01\x10\x00\x1a",
        reply_size,
        reply_proto,
    ]
    return _frame(request_id, b"\x32", member, 5 + len(reply_size) + len(reply_proto))


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
        if self._broken is not None:
            raise self._broken
        buf = self._buf
        if buf:
            buf += data
            source: Buffer = buf
        else:
            source = data
            total = len(data)
            if total > HEADER_SIZE and _HEADER.unpack_from(data)[0] == total - HEADER_SIZE:
                return self._single_frame(data, total - HEADER_SIZE)
        frames: list[IPCFrame] = []
        total = len(source)
        pos = 0
        with memoryview(source) as view:
            while total - pos >= HEADER_SIZE:
                (size,) = _HEADER.unpack_from(view, pos)
                if size > self._max_payload:
                    self._broken = FrameTooLargeError(size, self._max_payload)
                    break
                end = pos + HEADER_SIZE + size
                if end > total:
                    break
                if size:
                    frame = IPCFrame()
                    try:
                        # protobuf parses any buffer; its stubs only name bytes.
                        frame.ParseFromString(cast(bytes, view[pos + HEADER_SIZE : end]))
                    except DecodeError:
                        _log.debug("dropping an IPC frame that does not parse (%d bytes)", size)
                    else:
                        frames.append(frame)
                pos = end
        if self._broken is not None:
            buf.clear()
            raise self._broken
        if source is buf:
            del buf[:pos]
        elif pos < total:
            buf += source[pos:]
        return frames

    def _single_frame(self, data: Buffer, size: int) -> list[IPCFrame]:
        """The common case: `data` is exactly one whole frame."""
        if size > self._max_payload:
            self._broken = FrameTooLargeError(size, self._max_payload)
            raise self._broken
        frame = IPCFrame()
        try:
            # protobuf parses any buffer; its stubs only name bytes.
            frame.ParseFromString(cast(bytes, data[HEADER_SIZE:]))
        except DecodeError:
            _log.debug("dropping an IPC frame that does not parse (%d bytes)", size)
            return []
        return [frame]
