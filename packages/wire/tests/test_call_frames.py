"""The hand-written codec of InvokeMethod and InvokeMethodReply against protobuf."""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st
from perfetto_protos.ipc import consumer_port_pb2 as cp
from perfetto_protos.ipc import producer_port_pb2 as pp
from perfetto_protos.ipc.wire_protocol_pb2 import IPCFrame
from perfetto_wire import (
    Deferred,
    FrameDecoder,
    Host,
    Reply,
    ServiceDescriptor,
    ServiceProxy,
    encode_frame,
)
from perfetto_wire._call_frames import decode_invoke, decode_invoke_reply
from perfetto_wire._client import ClientConnection
from perfetto_wire._endpoint import GATHER_MIN_PAYLOAD, FrameEndpoint
from perfetto_wire._framing import IPC_BUFFER_SIZE
from perfetto_wire._sockets import recv_with_fd
from perfetto_wire._transport import SocketTransport

u64 = (
    st.integers(min_value=0, max_value=0x4000)
    | st.integers(min_value=0x4000, max_value=0x200000)
    | st.integers(min_value=0, max_value=2**64 - 1)
)
u32 = st.integers(min_value=0, max_value=0x80) | st.integers(min_value=0, max_value=2**32 - 1)
payloads = st.binary(max_size=300)


def fields_of_invoke(frame: IPCFrame) -> tuple[int, int, int, bytes, bool]:
    call = frame.msg_invoke_method
    return frame.request_id, call.service_id, call.method_id, call.args_proto, call.drop_reply


def fields_of_reply(frame: IPCFrame) -> tuple[int, bool, bool, bytes]:
    reply = frame.msg_invoke_method_reply
    return frame.request_id, reply.success, reply.has_more, reply.reply_proto


def decoded_invoke(payload: bytes) -> tuple[int, int, int, bytes, bool] | None:
    # Inside a larger buffer, as received: nothing outside start..end may be read.
    data = memoryview(b"\x10\x2a\xff" + payload + b"\x2a\x08\x01")
    decoded = decode_invoke(data, 3, 3 + len(payload))
    if decoded is None:
        return None
    request_id, service_id, method_id, args, drop = decoded
    return request_id, service_id, method_id, bytes(args), drop


def decoded_reply(payload: bytes) -> tuple[int, bool, bool, bytes] | None:
    data = memoryview(b"\x10\x32\xff" + payload + b"\x32\x08\x01")
    decoded = decode_invoke_reply(data, 3, 3 + len(payload))
    if decoded is None:
        return None
    request_id, success, has_more, reply = decoded
    return request_id, success, has_more, bytes(reply)


def parsed(payload: bytes) -> IPCFrame | None:
    frames = FrameDecoder().feed(len(payload).to_bytes(4, "little") + payload)
    return frames[0] if frames else None


@settings(max_examples=200, deadline=None)
@given(
    request_id=st.none() | u64,
    service_id=st.none() | u32,
    method_id=st.none() | u32,
    args=st.none() | payloads,
    drop=st.none() | st.booleans(),
)
def test_invoke_frames_from_protobuf_decode_by_hand(
    request_id: int | None,
    service_id: int | None,
    method_id: int | None,
    args: bytes | None,
    drop: bool | None,
) -> None:
    frame = IPCFrame()
    if request_id is not None:
        frame.request_id = request_id
    call = frame.msg_invoke_method
    call.SetInParent()
    if service_id is not None:
        call.service_id = service_id
    if method_id is not None:
        call.method_id = method_id
    if args is not None:
        call.args_proto = args
    if drop is not None:
        call.drop_reply = drop
    assert decoded_invoke(frame.SerializeToString()) == fields_of_invoke(frame)


@settings(max_examples=200, deadline=None)
@given(
    request_id=st.none() | u64,
    success=st.none() | st.booleans(),
    has_more=st.none() | st.booleans(),
    reply=st.none() | payloads,
)
def test_reply_frames_from_protobuf_decode_by_hand(
    request_id: int | None, success: bool | None, has_more: bool | None, reply: bytes | None
) -> None:
    frame = IPCFrame()
    if request_id is not None:
        frame.request_id = request_id
    answer = frame.msg_invoke_method_reply
    answer.SetInParent()
    if success is not None:
        answer.success = success
    if has_more is not None:
        answer.has_more = has_more
    if reply is not None:
        answer.reply_proto = reply
    assert decoded_reply(frame.SerializeToString()) == fields_of_reply(frame)


def test_other_frames_are_left_to_protobuf() -> None:
    bind = IPCFrame(request_id=1)
    bind.msg_bind_service.service_name = "ProducerPort"
    tested = IPCFrame(request_id=1, data_for_testing=[b"x"])
    tested.msg_invoke_method.service_id = 1
    for frame in (bind, tested):
        assert decoded_invoke(frame.SerializeToString()) is None
        assert decoded_reply(frame.SerializeToString()) is None


# Frames close to the hand-decoded ones: real frames with bytes flipped, cut or appended.
near_frames = st.builds(
    lambda request_id, args, flips, cut, tail: _mutate(
        encode_frame(_invoke(request_id, args))[4:], flips, cut, tail
    ),
    u64,
    payloads,
    st.lists(st.tuples(st.integers(min_value=0), st.integers(0, 255)), max_size=3),
    st.integers(min_value=0, max_value=3),
    st.binary(max_size=3),
)


def _invoke(request_id: int, args: bytes) -> IPCFrame:
    frame = IPCFrame(request_id=request_id)
    call = frame.msg_invoke_method
    call.service_id, call.method_id, call.args_proto, call.drop_reply = 1, 2, args, False
    return frame


def _mutate(payload: bytes, flips: list[tuple[int, int]], cut: int, tail: bytes) -> bytes:
    data = bytearray(payload)
    for position, value in flips:
        data[position % len(data)] = value
    return bytes(data[: max(1, len(data) - cut)]) + tail


@settings(max_examples=300, deadline=None)
@given(payload=near_frames | st.binary(max_size=40))
def test_hand_decoders_never_disagree_with_protobuf(payload: bytes) -> None:
    frame = parsed(payload)
    for decoded, fields in (
        (decoded_invoke(payload), fields_of_invoke),
        (decoded_reply(payload), fields_of_reply),
    ):
        if decoded is not None:
            assert frame is not None
            assert decoded == fields(frame)


def test_send_parts_queues_what_the_socket_cannot_take_and_passes_the_fd() -> None:
    loop = asyncio.new_event_loop()
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    ours.setblocking(False)
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    transport = SocketTransport(loop, ours, send_timeout=None)
    header, payload = b"head", os.urandom(1 << 20)
    read_fd, write_fd = os.pipe()
    try:
        transport.send_parts((header, payload), write_fd)
        os.close(write_fd)
        assert 0 < transport.queued_bytes < len(header) + len(payload)
        received = bytearray()
        fds: list[int] = []
        theirs.settimeout(10)
        buffer = memoryview(bytearray(1 << 16))
        while len(received) < len(header) + len(payload):
            loop.run_until_complete(asyncio.sleep(0))
            size, fd = recv_with_fd(theirs, buffer)
            assert size
            received += buffer[:size]
            if fd is not None:
                fds.append(fd)
        assert received == header + payload
        assert transport.queued_bytes == 0
        assert len(fds) == 1
        os.write(fds[0], b"!")
        assert os.read(read_fd, 1) == b"!"
        os.close(fds[0])
    finally:
        os.close(read_fd)
        transport.close()
        theirs.close()
        loop.close()


class SharedBufferLink:
    """Delivers bytes to a core through one reused buffer, scribbled over after each delivery,
    like a socket adapter reusing its receive buffer."""

    def __init__(self) -> None:
        self.peer: FrameEndpoint | None = None
        self.buffer = bytearray(IPC_BUFFER_SIZE)

    def send(self, data: bytes, fd: int | None = None) -> None:
        assert self.peer is not None
        self.buffer[: len(data)] = data
        self.peer.receive_data(memoryview(self.buffer)[: len(data)], fd)
        self.buffer[: len(data)] = b"\xee" * len(data)

    def send_parts(self, parts: Sequence[bytes], fd: int | None = None) -> None:
        self.send(b"".join(parts), fd)

    def close(self) -> None:
        """Nothing to release."""


def test_requests_and_replies_do_not_alias_the_receive_buffer() -> None:
    requests: list[pp.RegisterDataSourceRequest] = []
    bulk = cp.ReadBuffersResponse()
    bulk.slices.add(data=os.urandom(GATHER_MIN_PAYLOAD * 2), last_slice_for_packet=True)

    def register(
        request: pp.RegisterDataSourceRequest, call: Deferred
    ) -> pp.RegisterDataSourceResponse:
        requests.append(request)
        return pp.RegisterDataSourceResponse()

    host = Host()
    host.expose_service(
        ServiceDescriptor.for_service("ProducerPort"), {"RegisterDataSource": register}
    )
    host.expose_service(
        ServiceDescriptor.for_service("ConsumerPort"), {"ReadBuffers": lambda r, c: bulk}
    )
    to_client, to_host = SharedBufferLink(), SharedBufferLink()
    to_host.peer = host.connect(to_client, uid=1, pid=2)
    client = ClientConnection(to_host)
    to_client.peer = client
    proxies: list[ServiceProxy | None] = []
    client.bind("ProducerPort", proxies.append)
    client.bind("ConsumerPort", proxies.append)
    producer, consumer = proxies
    assert producer is not None
    assert consumer is not None
    replies: list[Reply] = []
    request = pp.RegisterDataSourceRequest()
    request.data_source_descriptor.name = "track_event"
    client.invoke(producer, "RegisterDataSource", request, replies.append)
    client.invoke(consumer, "ReadBuffers", cp.ReadBuffersRequest(), replies.append)
    assert requests == [request]
    assert [reply.message for reply in replies] == [pp.RegisterDataSourceResponse(), bulk]
