"""The two frames on every call's path, encoded and decoded by hand.

An InvokeMethod goes one way and an InvokeMethodReply comes back for every call. Writing and
reading their few fields directly costs a fraction of building and parsing an `IPCFrame`, and
a reply's payload is handed on as a slice of the received buffer instead of being copied out
of a parsed frame. The encoders produce exactly protobuf's bytes. The decoders accept the
layout every known peer writes (request_id, then the one member, fields in any order) and
answer None for anything else, so the caller falls back to protobuf and its semantics.
"""

from __future__ import annotations

from perfetto_wire._framing import HEADER_SIZE, MAX_PAYLOAD_SIZE, Buffer, FrameTooLargeError

__all__ = [
    "decode_invoke",
    "decode_invoke_reply",
    "encode_invoke",
    "invoke_reply_header",
]

_ONE_BYTE_VARINTS = [bytes((value,)) for value in range(0x80)]
_UINT32_MAX = 0xFFFFFFFF
_UINT64_MAX = 0xFFFFFFFFFFFFFFFF
_MAX_VARINT_SHIFT = 63  # the tenth byte of a varint holds bit 63

# IPCFrame: request_id = 2 (varint); members msg_invoke_method = 5, msg_invoke_method_reply = 6.
_TAG_REQUEST_ID = 0x10
_TAG_INVOKE = 0x2A
_TAG_INVOKE_REPLY = 0x32
# InvokeMethod: service_id = 1, method_id = 2, args_proto = 3 (bytes), drop_reply = 4.
# InvokeMethodReply: success = 1, has_more = 2, reply_proto = 3 (bytes).
_TAG_FIELD_1 = 0x08
_TAG_FIELD_2 = 0x10
_TAG_BYTES_3 = 0x1A
_TAG_FIELD_4 = 0x20


def _varint(value: int) -> bytes:
    if value < 0x80:
        return _ONE_BYTE_VARINTS[value]
    if value < 0x4000:
        return bytes(((value & 0x7F) | 0x80, value >> 7))
    if value < 0x200000:
        return bytes(((value & 0x7F) | 0x80, ((value >> 7) & 0x7F) | 0x80, value >> 14))
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _frame_header(payload_size: int) -> bytes:
    if payload_size > MAX_PAYLOAD_SIZE:
        raise FrameTooLargeError(payload_size)
    return payload_size.to_bytes(HEADER_SIZE, "little")


def encode_invoke(
    request_id: int, service_id: int, method_id: int, args_proto: bytes, drop_reply: bool
) -> bytes:
    """An InvokeMethod frame, every field set like upstream's client sets them."""
    args_length = len(args_proto)
    if args_length < 0x70 and service_id < 0x80 and method_id < 0x80:
        # Every varint but the request id is one byte: 08 s 10 m 1a n <args> 20 d.
        member = (0x2A, 8 + args_length, 0x08, service_id, 0x10, method_id, 0x1A, args_length)
        tail = b"\x20\x01" if drop_reply else b"\x20\x00"
        if request_id < 0x80:
            return bytes((12 + args_length, 0, 0, 0, 0x10, request_id, *member)) + args_proto + tail
        request = _varint(request_id)
        head = bytes((11 + len(request) + args_length, 0, 0, 0, 0x10))
        return head + request + bytes(member) + args_proto + tail
    small = _ONE_BYTE_VARINTS
    request = small[request_id] if request_id < 0x80 else _varint(request_id)
    service = small[service_id] if service_id < 0x80 else _varint(service_id)
    method = small[method_id] if method_id < 0x80 else _varint(method_id)
    args_length = len(args_proto)
    args_size = small[args_length] if args_length < 0x80 else _varint(args_length)
    member_size = 5 + len(service) + len(method) + len(args_size) + args_length
    member_varint = small[member_size] if member_size < 0x80 else _varint(member_size)
    return b"".join(
        (
            _frame_header(2 + len(request) + len(member_varint) + member_size),
            b"\x10",
            request,
            b"\x2a",
            member_varint,
            b"\x08",
            service,
            b"\x10",
            method,
            b"\x1a",
            args_size,
            args_proto,
            b"\x20\x01" if drop_reply else b"\x20\x00",
        )
    )


def invoke_reply_header(request_id: int, has_more: bool, reply_size: int) -> bytes:
    """Everything of a successful InvokeMethodReply frame up to its `reply_size` payload bytes.

    The frame is this header followed by the serialized reply, so a large reply can be
    written after it without being copied into one buffer.
    """
    if reply_size < 0x70:
        # 32 m 08 01 10 h 1a n: every varint but the request id is one byte.
        member = (0x32, 6 + reply_size, 0x08, 0x01, 0x10, 1 if has_more else 0, 0x1A, reply_size)
        if request_id < 0x80:
            return bytes((10 + reply_size, 0, 0, 0, 0x10, request_id, *member))
        request = _varint(request_id)
        head = bytes((9 + len(request) + reply_size, 0, 0, 0, 0x10))
        return head + request + bytes(member)
    small = _ONE_BYTE_VARINTS
    request = small[request_id] if request_id < 0x80 else _varint(request_id)
    reply_varint = small[reply_size] if reply_size < 0x80 else _varint(reply_size)
    member_size = 5 + len(reply_varint) + reply_size
    member_varint = small[member_size] if member_size < 0x80 else _varint(member_size)
    return b"".join(
        (
            _frame_header(2 + len(request) + len(member_varint) + member_size),
            b"\x10",
            request,
            b"\x32",
            member_varint,
            b"\x08\x01\x10\x01\x1a" if has_more else b"\x08\x01\x10\x00\x1a",
            reply_varint,
        )
    )


def _slow_varint(data: Buffer, pos: int, end: int) -> tuple[int, int]:
    """The varint at `pos` as (value, next position); next position -1 if malformed."""
    value = 0
    shift = 0
    while pos < end and shift <= _MAX_VARINT_SHIFT:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
    return 0, -1


def _member_start(data: Buffer, start: int, end: int, tag: int) -> tuple[int, int]:
    """(request_id, first byte of the member) of a frame laid out as request_id + member `tag`.

    The position is -1 when the frame has any other layout.
    """
    pos = start
    request_id = 0
    if pos < end and data[pos] == _TAG_REQUEST_ID:
        pos += 1
        if pos < end and data[pos] < 0x80:
            request_id = data[pos]
            pos += 1
        elif pos + 1 < end and data[pos + 1] < 0x80:
            request_id = (data[pos] & 0x7F) | (data[pos + 1] << 7)
            pos += 2
        else:
            request_id, pos = _slow_varint(data, pos, end)
            if pos < 0 or request_id > _UINT64_MAX:
                return 0, -1
    if pos >= end or data[pos] != tag:
        return 0, -1
    pos += 1
    if pos < end and data[pos] < 0x80:
        size = data[pos]
        pos += 1
    else:
        size, pos = _slow_varint(data, pos, end)
        if pos < 0:
            return 0, -1
    if pos + size != end:
        return 0, -1
    return request_id, pos


def decode_invoke(data: Buffer, start: int, end: int) -> tuple[int, int, int, Buffer, bool] | None:
    """(request_id, service_id, method_id, args_proto, drop_reply) of the IPCFrame in
    `data[start:end]`, or None unless it is an InvokeMethod in the usual layout.

    `args_proto` is a slice of `data`.
    """
    request_id, pos = _member_start(data, start, end, _TAG_INVOKE)
    if pos < 0:
        return None
    service_id = method_id = 0
    args_proto: Buffer = b""
    drop_reply = False
    while pos < end - 1:
        tag = data[pos]
        value = data[pos + 1]
        if value < 0x80:
            pos += 2
        else:
            value, pos = _slow_varint(data, pos + 1, end)
            if pos < 0:
                return None
        if tag == _TAG_BYTES_3:
            if pos + value > end:
                return None
            args_proto = data[pos : pos + value]
            pos += value
        elif tag == _TAG_FIELD_1 and value <= _UINT32_MAX:
            service_id = value
        elif tag == _TAG_FIELD_2 and value <= _UINT32_MAX:
            method_id = value
        elif tag == _TAG_FIELD_4 and value <= _UINT64_MAX:
            drop_reply = value != 0
        else:
            return None
    if pos != end:
        return None
    return request_id, service_id, method_id, args_proto, drop_reply


def decode_invoke_reply(
    data: Buffer, start: int, end: int
) -> tuple[int, bool, bool, Buffer] | None:
    """(request_id, success, has_more, reply_proto) of the IPCFrame in `data[start:end]`, or
    None unless it is an InvokeMethodReply in the usual layout.

    `reply_proto` is a slice of `data`.
    """
    request_id, pos = _member_start(data, start, end, _TAG_INVOKE_REPLY)
    if pos < 0:
        return None
    success = has_more = False
    reply_proto: Buffer = b""
    while pos < end - 1:
        tag = data[pos]
        value = data[pos + 1]
        if value < 0x80:
            pos += 2
        else:
            value, pos = _slow_varint(data, pos + 1, end)
            if pos < 0 or value > _UINT64_MAX:
                return None
        if tag == _TAG_BYTES_3:
            if pos + value > end:
                return None
            reply_proto = data[pos : pos + value]
            pos += value
        elif tag == _TAG_FIELD_1:
            success = value != 0
        elif tag == _TAG_FIELD_2:
            has_more = value != 0
        else:
            return None
    if pos != end:
        return None
    return request_id, success, has_more, reply_proto
