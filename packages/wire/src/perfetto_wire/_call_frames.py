"""The two frames on every call's path, encoded and decoded by hand, and the BindService reply.

An InvokeMethod goes one way and an InvokeMethodReply comes back for every call. Writing and
reading their few fields directly costs a fraction of building and parsing an `IPCFrame`, and
a reply's payload is handed on as a slice of the received buffer instead of being copied out
of a parsed frame. The encoders produce exactly the bytes of upstream's clients and hosts. The
decoders accept the layout every known peer writes (request_id, then the one member, fields in
any order, the member's size in any varint form) and answer None for anything else, so the
caller falls back to protobuf and its semantics. A service's BindService reply differs only by
its request id: its member is serialized once (`bind_reply_member`) and each reply is that
member behind the request id (`encode_bind_reply`).
"""

from __future__ import annotations

from collections.abc import Sequence

from perfetto_protos.ipc.wire_protocol_pb2 import IPCFrame
from perfetto_protos.tags import fields
from protozero import (
    MAX_ONE_BYTE_MESSAGE_LENGTH,
    encode_varint,
    read_varint,
    write_redundant_varint,
)

from perfetto_wire._framing import (
    HEADER_SIZE,
    MAX_PAYLOAD_SIZE,
    SERIALIZER_SLICE_SIZE,
    Buffer,
    FrameTooLargeError,
    serialize,
)

__all__ = [
    "bind_reply_member",
    "decode_invoke",
    "decode_invoke_reply",
    "encode_bind_reply",
    "encode_invoke",
    "invoke_reply_header",
]

_UINT32_MAX = 0xFFFFFFFF

_REQUEST_ID = fields.IPCFrame_request_id_TAG
_INVOKE = fields.IPCFrame_msg_invoke_method_TAG
_INVOKE_REPLY = fields.IPCFrame_msg_invoke_method_reply_TAG
_SERVICE_ID = fields.IPCFrame_InvokeMethod_service_id_TAG
_METHOD_ID = fields.IPCFrame_InvokeMethod_method_id_TAG
_ARGS_PROTO = fields.IPCFrame_InvokeMethod_args_proto_TAG
_DROP_REPLY = fields.IPCFrame_InvokeMethod_drop_reply_TAG
_SUCCESS = fields.IPCFrame_InvokeMethodReply_success_TAG
_HAS_MORE = fields.IPCFrame_InvokeMethodReply_has_more_TAG
_REPLY_PROTO = fields.IPCFrame_InvokeMethodReply_reply_proto_TAG
_MAX_REQUEST_ID_FIELD = 1 + 10
"""The request id's tag and its longest varint."""
# Every tag above is one byte (fields 1 to 6).
_DROP_REPLY_TRUE = bytes((_DROP_REPLY, 1))
_DROP_REPLY_FALSE = bytes((_DROP_REPLY, 0))
_SUCCESS_HAS_MORE = bytes((_SUCCESS, 1, _HAS_MORE, 1, _REPLY_PROTO))
_SUCCESS_LAST = bytes((_SUCCESS, 1, _HAS_MORE, 0, _REPLY_PROTO))


def _member_size(size: int) -> bytes:
    """The size field upstream gives the frame's member: 1 byte up to 127, else 4 bytes."""
    if size <= MAX_ONE_BYTE_MESSAGE_LENGTH:
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
        # Every varint but the request id is one byte: service, method, args' size, drop_reply.
        tail = _DROP_REPLY_TRUE if drop_reply else _DROP_REPLY_FALSE
        if request_id < 0x80:
            # fmt: off
            frame = (
                12 + args_length, 0, 0, 0, _REQUEST_ID, request_id,
                _INVOKE, 8 + args_length, _SERVICE_ID, service_id, _METHOD_ID, method_id,
                _ARGS_PROTO, args_length,
            )
            # fmt: on
            return bytes(frame) + args_proto + tail
        request = encode_varint(request_id)
        head = bytes((11 + len(request) + args_length, 0, 0, 0, _REQUEST_ID))
        member = (_INVOKE, 8 + args_length, _SERVICE_ID, service_id, _METHOD_ID, method_id)
        return head + request + bytes((*member, _ARGS_PROTO, args_length)) + args_proto + tail
    request = encode_varint(request_id)
    service = encode_varint(service_id)
    method = encode_varint(method_id)
    args_size = encode_varint(args_length)
    member_size = 5 + len(service) + len(method) + len(args_size) + args_length
    member_varint = _member_size(member_size)
    return b"".join(
        (
            _frame_header(2 + len(request) + len(member_varint) + member_size),
            bytes((_REQUEST_ID,)),
            request,
            bytes((_INVOKE,)),
            member_varint,
            bytes((_SERVICE_ID,)),
            service,
            bytes((_METHOD_ID,)),
            method,
            bytes((_ARGS_PROTO,)),
            args_size,
            args_proto,
            _DROP_REPLY_TRUE if drop_reply else _DROP_REPLY_FALSE,
        )
    )


def invoke_reply_header(request_id: int, has_more: bool, reply_size: int) -> bytes:
    """Everything of a successful InvokeMethodReply frame up to its `reply_size` payload bytes.

    The frame is this header followed by the serialized reply, so a large reply can be
    written after it without being copied into one buffer.
    """
    if reply_size < 0x70:
        # Every varint but the request id is one byte: success, has_more, the reply's size.
        more = 1 if has_more else 0
        if request_id < 0x80:
            # fmt: off
            return bytes((
                10 + reply_size, 0, 0, 0, _REQUEST_ID, request_id,
                _INVOKE_REPLY, 6 + reply_size, _SUCCESS, 1, _HAS_MORE, more,
                _REPLY_PROTO, reply_size,
            ))
            # fmt: on
        request = encode_varint(request_id)
        head = bytes((9 + len(request) + reply_size, 0, 0, 0, _REQUEST_ID))
        member = (_INVOKE_REPLY, 6 + reply_size, _SUCCESS, 1, _HAS_MORE, more)
        return head + request + bytes((*member, _REPLY_PROTO, reply_size))
    request = encode_varint(request_id)
    reply_varint = encode_varint(reply_size)
    member_size = 5 + len(reply_varint) + reply_size
    member_varint = _member_size(member_size)
    return b"".join(
        (
            _frame_header(2 + len(request) + len(member_varint) + member_size),
            bytes((_REQUEST_ID,)),
            request,
            bytes((_INVOKE_REPLY,)),
            member_varint,
            _SUCCESS_HAS_MORE if has_more else _SUCCESS_LAST,
            reply_varint,
        )
    )


def bind_reply_member(service_id: int, methods: Sequence[tuple[int, str]]) -> bytes | None:
    """The msg_bind_service_reply of a successful BindService listing `methods` (id, name),
    serialized as `serialize` serializes the whole reply frame; None if
    a reply frame could reach past one serializer slice, where that depends on the request id.
    """
    frame = IPCFrame()
    reply = frame.msg_bind_service_reply
    reply.success = True
    reply.service_id = service_id
    for method_id, name in methods:
        reply.methods.add(id=method_id, name=name)
    member = serialize(frame)
    if len(member) + _MAX_REQUEST_ID_FIELD > SERIALIZER_SLICE_SIZE:
        return None
    return member


def encode_bind_reply(request_id: int, member: bytes) -> bytes:
    """The BindService reply frame of `request_id`, whose member `bind_reply_member` gave."""
    payload = bytes((_REQUEST_ID,)) + encode_varint(request_id) + member
    return _frame_header(len(payload)) + payload


def _member_start(data: Buffer, start: int, end: int, tag: int) -> tuple[int, int]:
    """(request_id, first byte of the member) of a frame laid out as request_id + member `tag`.

    The position is -1 when the frame has any other layout.
    """
    pos = start
    request_id = 0
    if pos < end and data[pos] == _REQUEST_ID:
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
    request_id, pos = _member_start(data, start, end, _INVOKE)
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
        if tag == _ARGS_PROTO:
            if pos + value > end:
                return None
            args_proto = data[pos : pos + value]
            pos += value
        elif tag == _SERVICE_ID and value <= _UINT32_MAX:
            service_id = value
        elif tag == _METHOD_ID and value <= _UINT32_MAX:
            method_id = value
        elif tag == _DROP_REPLY:
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
    request_id, pos = _member_start(data, start, end, _INVOKE_REPLY)
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
        if tag == _REPLY_PROTO:
            if pos + value > end:
                return None
            reply_proto = data[pos : pos + value]
            pos += value
        elif tag == _SUCCESS:
            success = value != 0
        elif tag == _HAS_MORE:
            has_more = value != 0
        else:
            return None
    if pos != end:
        return None
    return request_id, success, has_more, reply_proto
