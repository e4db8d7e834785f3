"""The two frames on every call's path, encoded and decoded by hand.

An InvokeMethod goes one way and an InvokeMethodReply comes back for every call. Writing and
reading their few fields directly costs a fraction of building and parsing an `IPCFrame`, and
a reply's payload is handed on as a slice of the received buffer instead of being copied out
of a parsed frame. The encoders produce exactly the bytes of upstream's clients and hosts. The
decoders accept the layout every known peer writes (request_id, then the one member, fields in
any order, the member's size in any varint form) and answer None for anything else, so the
caller falls back to protobuf and its semantics.
"""

from __future__ import annotations

from protozero import encode_varint, read_varint, write_redundant_varint

from perfetto_wire._framing import (
    HEADER_SIZE,
    MAX_ONE_BYTE_NESTED_SIZE,
    MAX_PAYLOAD_SIZE,
    Buffer,
    FrameTooLargeError,
)

__all__ = [
    "decode_invoke",
    "decode_invoke_reply",
    "encode_invoke",
    "invoke_reply_header",
]

_UINT32_MAX = 0xFFFFFFFF

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


def _member_size(size: int) -> bytes:
    """The size field upstream gives the frame's member: 1 byte up to 127, else 4 bytes."""
    if size <= MAX_ONE_BYTE_NESTED_SIZE:
        return encode_varint(size)
    field = bytearray(4)
    write_redundant_varint(field, 0, size)
    return bytes(field)


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
        request = encode_varint(request_id)
        head = bytes((11 + len(request) + args_length, 0, 0, 0, 0x10))
        return head + request + bytes(member) + args_proto + tail
    request = encode_varint(request_id)
    service = encode_varint(service_id)
    method = encode_varint(method_id)
    args_size = encode_varint(args_length)
    member_size = 5 + len(service) + len(method) + len(args_size) + args_length
    member_varint = _member_size(member_size)
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
        request = encode_varint(request_id)
        head = bytes((9 + len(request) + reply_size, 0, 0, 0, 0x10))
        return head + request + bytes(member)
    request = encode_varint(request_id)
    reply_varint = encode_varint(reply_size)
    member_size = 5 + len(reply_varint) + reply_size
    member_varint = _member_size(member_size)
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


def _member_start(data: Buffer, start: int, end: int, tag: int) -> tuple[int, int]:
    """(request_id, first byte of the member) of a frame laid out as request_id + member `tag`.

    The position is -1 when the frame has any other layout.
    """
    pos = start
    request_id = 0
    if pos < end and data[pos] == _TAG_REQUEST_ID:
        request_id, pos = read_varint(data, pos + 1, end)
        if pos < 0:
            return 0, -1
    if pos >= end or data[pos] != tag:
        return 0, -1
    pos += 1
    if pos < end and data[pos] < 0x80:
        size = data[pos]
        pos += 1
    else:
        size, pos = read_varint(data, pos, end)
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
            value, pos = read_varint(data, pos + 1, end)
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
        elif tag == _TAG_FIELD_4:
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
            value, pos = read_varint(data, pos + 1, end)
            if pos < 0:
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
