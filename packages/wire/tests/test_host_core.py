"""The sans-I/O host: binding, dispatch, replies, errors, fds, identity; fuzzed with hypothesis."""

from __future__ import annotations

import logging
import os
from typing import Any

import pytest
from google.protobuf.message import DecodeError, Message
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from perfetto_protos.ipc import producer_port_pb2 as pp
from perfetto_protos.ipc.wire_protocol_pb2 import IPCFrame
from perfetto_wire import (
    ClientInfo,
    Deferred,
    FrameDecoder,
    FrameTooLargeError,
    Host,
    ServiceDescriptor,
    WireError,
    encode_frame,
)
from perfetto_wire._call_frames import bind_reply_member
from perfetto_wire._descriptors import MethodDescriptor
from perfetto_wire._framing import MAX_PAYLOAD_SIZE
from perfetto_wire._host import HostConnection, machine_id_for

PRODUCER_PORT = ServiceDescriptor.for_service("ProducerPort")


class RecordingTransport:
    """Collects what the host writes, decoded back into frames."""

    def __init__(self) -> None:
        self.decoder = FrameDecoder()
        self.frames: list[IPCFrame] = []
        self.fds: list[int | None] = []
        self.raw: list[bytes] = []
        self.closed = False

    def send(self, data: bytes, fd: int | None = None) -> None:
        self.raw.append(data)
        new = self.decoder.feed(data)
        self.frames += new
        self.fds += [fd] * len(new)

    def close(self) -> None:
        self.closed = True

    def pop(self) -> list[IPCFrame]:
        frames, self.frames = self.frames, []
        self.fds = []
        return frames


def bind(name: str, request_id: int = 1) -> bytes:
    frame = IPCFrame(request_id=request_id)
    frame.msg_bind_service.service_name = name
    return encode_frame(frame)


def invoke(
    method_id: int,
    request: Message | bytes,
    *,
    request_id: int = 2,
    service_id: int = 1,
    drop_reply: bool = False,
) -> bytes:
    frame = IPCFrame(request_id=request_id)
    call = frame.msg_invoke_method
    call.service_id = service_id
    call.method_id = method_id
    call.args_proto = request if isinstance(request, bytes) else request.SerializeToString()
    call.drop_reply = drop_reply
    return encode_frame(frame)


def method_id(name: str) -> int:
    return PRODUCER_PORT.method(name).id


class Handlers:
    """A few ProducerPort handlers that record what they saw."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Message, Deferred]] = []
        self.deferred: list[Deferred] = []

    def Sync(self, request: pp.SyncRequest, call: Deferred) -> pp.SyncResponse:
        self.calls.append(("Sync", request, call))
        return pp.SyncResponse()

    def initialize_connection(
        self, request: pp.InitializeConnectionRequest, call: Deferred
    ) -> pp.InitializeConnectionResponse:
        self.calls.append(("InitializeConnection", request, call))
        fd = call.take_received_fd()
        if fd is not None:
            os.close(fd)
        return pp.InitializeConnectionResponse(using_shmem_provided_by_producer=fd is not None)

    def get_async_command(self, request: pp.GetAsyncCommandRequest, call: Deferred) -> None:
        self.deferred.append(call)

    def activate_triggers(self, request: pp.ActivateTriggersRequest, call: Deferred) -> Any:
        action = request.trigger_names[0] if request.trigger_names else ""
        if action == "raise":
            raise RuntimeError("boom")
        if action == "wrong-type":
            return pp.SyncResponse()
        if action == "reject":
            call.reject()
            return None
        return pp.ActivateTriggersResponse()


@pytest.fixture
def handlers() -> Handlers:
    return Handlers()


@pytest.fixture
def events() -> list[tuple[str, ClientInfo]]:
    return []


@pytest.fixture
def host(handlers: Handlers, events: list[tuple[str, ClientInfo]]) -> Host:
    host = Host(
        on_connect=lambda info: events.append(("connect", info)),
        on_disconnect=lambda info: events.append(("disconnect", info)),
    )
    assert host.expose_service(PRODUCER_PORT, handlers) == 1
    return host


def connect(
    host: Host, uid: int = 1000, pid: int = 4242
) -> tuple[HostConnection, RecordingTransport]:
    transport = RecordingTransport()
    return host.connect(transport, uid=uid, pid=pid), transport


def test_bind_answers_service_id_and_method_table_in_declaration_order(host: Host) -> None:
    connection, transport = connect(host)
    connection.receive_data(bind("ProducerPort", request_id=7))
    (frame,) = transport.pop()
    assert frame.request_id == 7
    reply = frame.msg_bind_service_reply
    assert reply.success
    assert reply.service_id == 1
    names = [method.name for method in reply.methods]
    assert names[:5] == [
        "InitializeConnection",
        "RegisterDataSource",
        "UnregisterDataSource",
        "CommitData",
        "GetAsyncCommand",
    ]
    assert names[-2:] == ["Sync", "UpdateDataSource"]
    assert [method.id for method in reply.methods] == list(range(1, 13))


def _bind_reply_as_protobuf_gives_it(request_id: int, service_id: int, methods: Any) -> bytes:
    frame = IPCFrame(request_id=request_id)
    reply = frame.msg_bind_service_reply
    reply.success = True
    reply.service_id = service_id
    for method in methods:
        reply.methods.add(id=method.id, name=method.name)
    return encode_frame(frame)


@pytest.mark.parametrize("request_id", [0, 1, 127, 128, 2**32, 2**64 - 1])
def test_bind_replies_are_byte_for_byte_the_reply_frame_serialized_whole(
    request_id: int,
) -> None:
    host = Host()
    services = [ServiceDescriptor.for_service(n) for n in ("ProducerPort", "ConsumerPort")]
    for descriptor in services:
        host.expose_service(descriptor, {})
    connection, transport = connect(host)
    for service_id, descriptor in enumerate(services, start=1):
        connection.receive_data(bind(descriptor.name, request_id=request_id))
        assert transport.raw.pop() == _bind_reply_as_protobuf_gives_it(
            request_id, service_id, descriptor.methods
        )


def test_bind_reply_too_long_for_one_serializer_slice_is_built_per_request() -> None:
    methods = tuple(
        MethodDescriptor(index, f"Method{index:03d}" + "x" * 40, Message, Message)
        for index in range(1, 81)
    )
    descriptor = ServiceDescriptor("LongPort", methods)
    assert bind_reply_member(1, [(m.id, m.name) for m in methods]) is None
    host = Host()
    host.expose_service(descriptor, {})
    connection, transport = connect(host)
    connection.receive_data(bind("LongPort", request_id=300))
    assert transport.raw.pop() == _bind_reply_as_protobuf_gives_it(300, 1, methods)


def test_bind_unknown_service_fails_without_methods(host: Host) -> None:
    connection, transport = connect(host)
    connection.receive_data(bind("NoSuchPort"))
    (frame,) = transport.pop()
    assert frame.HasField("msg_bind_service_reply")
    assert not frame.msg_bind_service_reply.success
    assert len(frame.msg_bind_service_reply.methods) == 0


def test_service_ids_follow_exposure_order() -> None:
    host = Host()
    assert host.expose_service(PRODUCER_PORT, {}) == 1
    assert host.expose_service(ServiceDescriptor.for_service("RelayPort"), {}) == 2
    with pytest.raises(WireError):
        host.expose_service(PRODUCER_PORT, {})
    connection, transport = connect(host)
    connection.receive_data(bind("RelayPort"))
    assert transport.pop()[0].msg_bind_service_reply.service_id == 2


def test_handler_mapping_with_unknown_method_is_refused() -> None:
    with pytest.raises(WireError, match="NoSuchMethod"):
        Host().expose_service(PRODUCER_PORT, {"NoSuchMethod": lambda request, call: None})


def test_invoke_dispatches_to_the_handler_with_the_decoded_request(
    host: Host, handlers: Handlers
) -> None:
    connection, transport = connect(host, uid=1234, pid=5678)
    request = pp.InitializeConnectionRequest(producer_name="producer", sdk_version="1.0")
    connection.receive_data(invoke(method_id("InitializeConnection"), request, request_id=9))
    ((name, seen, call),) = handlers.calls
    assert (name, seen) == ("InitializeConnection", request)
    assert call.client == ClientInfo(1, 1234, 5678)
    (frame,) = transport.pop()
    assert frame.request_id == 9
    reply = frame.msg_invoke_method_reply
    assert reply.success
    assert not reply.has_more
    assert pp.InitializeConnectionResponse.FromString(reply.reply_proto) == (
        pp.InitializeConnectionResponse(using_shmem_provided_by_producer=False)
    )


def test_streamed_and_deferred_replies(host: Host, handlers: Handlers) -> None:
    connection, transport = connect(host)
    connection.receive_data(invoke(method_id("GetAsyncCommand"), pp.GetAsyncCommandRequest()))
    assert transport.pop() == []
    (call,) = handlers.deferred
    for instance in (1, 2):
        command = pp.GetAsyncCommandResponse()
        command.start_data_source.new_instance_id = instance
        call.resolve(command, has_more=True)
    call.resolve(pp.GetAsyncCommandResponse())
    frames = transport.pop()
    assert [frame.msg_invoke_method_reply.has_more for frame in frames] == [True, True, False]
    assert all(frame.request_id == 2 for frame in frames)
    assert call.done
    with pytest.raises(WireError, match="already been answered"):
        call.resolve(pp.GetAsyncCommandResponse())


def test_replies_give_large_nested_messages_upstreams_four_byte_sizes(
    host: Host, handlers: Handlers
) -> None:
    # Upstream's host serializes replies with its protozero-based generated classes: a nested
    # message above 127 bytes keeps the 4 bytes reserved for its size (153 is 99 81 80 00).
    connection, transport = connect(host)
    connection.receive_data(invoke(method_id("GetAsyncCommand"), pp.GetAsyncCommandRequest()))
    command = pp.GetAsyncCommandResponse()
    command.start_data_source.new_instance_id = 1
    command.start_data_source.config.name = "n" * 150
    handlers.deferred[0].resolve(command)
    config = bytes.fromhex("0a9601") + b"n" * 150  # DataSourceConfig {name}: 153 bytes
    start = bytes.fromhex("0801 12 99818000") + config  # StartDataSource: 160 bytes
    reply = bytes.fromhex("0a a0818000") + start  # GetAsyncCommandResponse: 165 bytes
    member = bytes.fromhex("0801 1000 1a a501") + reply  # InvokeMethodReply: 172 bytes
    assert transport.raw[-1] == bytes.fromhex("b3000000 1002 32 ac818000") + member


def test_serialized_replies_go_out_as_given(host: Host, handlers: Handlers) -> None:
    connection, transport = connect(host)
    connection.receive_data(invoke(method_id("GetAsyncCommand"), pp.GetAsyncCommandRequest()))
    call = handlers.deferred[0]
    call.resolve_serialized(b"\x0a\x02\x08\x01", has_more=True)
    call.resolve_serialized(b"")
    assert transport.raw[-2:] == [
        bytes.fromhex("0e000000 1002 320a 0801 1001 1a04 0a020801"),
        bytes.fromhex("0a000000 1002 3206 0801 1000 1a00"),
    ]
    assert call.done
    with pytest.raises(WireError, match="already been answered"):
        call.resolve_serialized(b"")


def test_reply_of_the_wrong_type_is_refused(host: Host, handlers: Handlers) -> None:
    connection, transport = connect(host)
    connection.receive_data(invoke(method_id("GetAsyncCommand"), pp.GetAsyncCommandRequest()))
    with pytest.raises(WireError, match="GetAsyncCommandResponse"):
        handlers.deferred[0].resolve(pp.SyncResponse())
    assert transport.pop() == []


def test_drop_reply_is_honoured(host: Host, handlers: Handlers) -> None:
    connection, transport = connect(host)
    connection.receive_data(invoke(method_id("Sync"), pp.SyncRequest(), drop_reply=True))
    assert len(handlers.calls) == 1
    assert transport.pop() == []


@pytest.mark.parametrize(
    ("service_id", "method"),
    [(2, 11), (0, 11), (1, 0), (1, 13), (1, 2**32 - 1)],
    ids=["unknown-service", "service-0", "method-0", "method-past-end", "method-huge"],
)
def test_bad_ids_fail_the_call(host: Host, service_id: int, method: int) -> None:
    connection, transport = connect(host)
    connection.receive_data(invoke(method, b"", service_id=service_id))
    (frame,) = transport.pop()
    assert frame.HasField("msg_invoke_method_reply")
    assert not frame.msg_invoke_method_reply.success
    assert frame.msg_invoke_method_reply.HasField("success")


def test_undecodable_args_fail_the_call(host: Host, handlers: Handlers) -> None:
    connection, transport = connect(host)
    connection.receive_data(invoke(method_id("Sync"), b"\xff\xff\xff"))
    assert handlers.calls == []
    assert not transport.pop()[0].msg_invoke_method_reply.success


def test_request_decoder_hands_the_handler_what_it_decoded() -> None:
    seen: list[object] = []

    def decode(data: bytes | bytearray | memoryview) -> object:
        if bytes(data) == b"bad":
            raise DecodeError("bad")
        return ("decoded", bytes(data))

    host = Host()
    host.expose_service(
        PRODUCER_PORT,
        {"CommitData": lambda request, call: seen.append(request)},
        {"CommitData": decode},
    )
    connection, transport = connect(host)
    connection.receive_data(bind("ProducerPort", request_id=1))
    transport.pop()
    connection.receive_data(invoke(method_id("CommitData"), b"\xff\xff\xff", request_id=2))
    assert seen == [("decoded", b"\xff\xff\xff")]  # protobuf would refuse these bytes
    connection.receive_data(invoke(method_id("CommitData"), b"bad", request_id=3))
    assert len(seen) == 1
    failed = transport.pop()[-1]
    assert failed.request_id == 3
    assert not failed.msg_invoke_method_reply.success


def test_request_decoder_for_an_unknown_method_is_refused() -> None:
    with pytest.raises(WireError, match="NoSuchMethod"):
        Host().expose_service(PRODUCER_PORT, {}, {"NoSuchMethod": bytes})


def test_method_without_handler_fails_the_call(host: Host) -> None:
    connection, transport = connect(host)
    connection.receive_data(invoke(method_id("UpdateDataSource"), pp.UpdateDataSourceRequest()))
    (frame,) = transport.pop()
    assert not frame.msg_invoke_method_reply.success
    assert not frame.msg_invoke_method_reply.has_more


@pytest.mark.parametrize("action", ["raise", "wrong-type", "reject"])
def test_handler_failures_answer_success_false(
    host: Host, action: str, caplog: pytest.LogCaptureFixture
) -> None:
    connection, transport = connect(host)
    request = pp.ActivateTriggersRequest(trigger_names=[action])
    with caplog.at_level(logging.ERROR, logger="perfetto_wire"):
        connection.receive_data(invoke(method_id("ActivateTriggers"), request))
    (frame,) = transport.pop()
    assert not frame.msg_invoke_method_reply.success
    if action == "raise":
        assert "RuntimeError: boom" in caplog.text
    connection.receive_data(invoke(method_id("Sync"), pp.SyncRequest(), request_id=3))
    assert transport.pop()[0].msg_invoke_method_reply.success


def test_frame_without_request_gets_request_error(host: Host) -> None:
    connection, transport = connect(host)
    connection.receive_data(encode_frame(IPCFrame(request_id=5, data_for_testing=[b"x"])))
    (frame,) = transport.pop()
    assert frame.request_id == 5
    assert frame.msg_request_error.error == "unknown request"


def test_oversize_frame_closes_the_connection(
    host: Host, events: list[tuple[str, ClientInfo]], caplog: pytest.LogCaptureFixture
) -> None:
    connection, transport = connect(host)
    with caplog.at_level(logging.WARNING, logger="perfetto_wire"):
        connection.receive_data((MAX_PAYLOAD_SIZE + 1).to_bytes(4, "little"))
    assert transport.closed
    assert connection.closed
    assert "too large" in caplog.text
    assert [kind for kind, _ in events] == ["connect", "disconnect"]
    connection.receive_data(bind("ProducerPort"))
    assert transport.pop() == []


def test_lifecycle_callbacks_and_client_ids(
    host: Host, events: list[tuple[str, ClientInfo]]
) -> None:
    first, _ = connect(host, pid=1)
    second, _ = connect(host, pid=2)
    assert [info.client_id for _, info in events] == [1, 2]
    assert host.connections == [first, second]
    first.connection_lost()
    first.connection_lost()
    assert events[-1] == ("disconnect", ClientInfo(1, 1000, 1))
    assert host.connections == [second]


def test_replies_after_disconnect_are_discarded(host: Host, handlers: Handlers) -> None:
    connection, transport = connect(host)
    connection.receive_data(invoke(method_id("GetAsyncCommand"), pp.GetAsyncCommandRequest()))
    connection.connection_lost()
    call = handlers.deferred[0]
    assert not call.connected
    call.resolve(pp.GetAsyncCommandResponse(), has_more=True)
    assert transport.raw == []


def test_fd_goes_to_the_handler_of_the_frame_it_came_with(host: Host) -> None:
    connection, transport = connect(host)
    read_end, write_end = os.pipe()
    try:
        data = bind("ProducerPort") + invoke(1, pp.InitializeConnectionRequest())
        connection.receive_data(data, write_end)
        frames = transport.pop()
        reply = pp.InitializeConnectionResponse.FromString(
            frames[1].msg_invoke_method_reply.reply_proto
        )
        assert reply.using_shmem_provided_by_producer
        with pytest.raises(OSError, match="Bad file descriptor"):
            os.fstat(write_end)
    finally:
        os.close(read_end)


def test_fd_received_with_a_partial_frame_waits_for_that_frame(host: Host) -> None:
    connection, transport = connect(host)
    read_end, write_end = os.pipe()
    try:
        data = invoke(1, pp.InitializeConnectionRequest())
        connection.receive_data(data[:3], write_end)
        assert transport.pop() == []
        connection.receive_data(data[3:])
        (frame,) = transport.pop()
        reply = pp.InitializeConnectionResponse.FromString(
            frame.msg_invoke_method_reply.reply_proto
        )
        assert reply.using_shmem_provided_by_producer
    finally:
        os.close(read_end)


def test_unclaimed_fd_is_closed_with_the_connection(host: Host) -> None:
    connection, _ = connect(host)
    read_end, write_end = os.pipe()
    try:
        connection.receive_data(bind("ProducerPort"), write_end)
        os.fstat(write_end)
        connection.connection_lost()
        with pytest.raises(OSError, match="Bad file descriptor"):
            os.fstat(write_end)
    finally:
        os.close(read_end)


def test_reply_fd_reaches_the_transport(host: Host, handlers: Handlers) -> None:
    connection, transport = connect(host)
    connection.receive_data(invoke(method_id("GetAsyncCommand"), pp.GetAsyncCommandRequest()))
    handlers.deferred[0].resolve(pp.GetAsyncCommandResponse(), has_more=True, fd=99)
    assert transport.fds == [99]


def identity(pid: int, uid: int, hint: str = "", name: str = "") -> bytes:
    frame = IPCFrame()
    peer = frame.set_peer_identity
    peer.pid, peer.uid, peer.machine_id_hint, peer.machine_name = pid, uid, hint, name
    return encode_frame(frame)


def test_set_peer_identity_is_ignored_on_unix_sockets(host: Host) -> None:
    connection, transport = connect(host, uid=10, pid=20)
    connection.receive_data(identity(1, 2, "hint"))
    assert connection.client_info == ClientInfo(1, 10, 20)
    assert transport.pop() == []


def test_set_peer_identity_on_tcp_first_one_wins(host: Host) -> None:
    connection = host.connect(RecordingTransport(), peer_address="10.0.0.7:4567")
    assert connection.client_info == ClientInfo(1, 0, -1)
    connection.receive_data(identity(77, 1001, "", "relay-box"))
    assert connection.client_info == ClientInfo(
        1, 1001, 77, machine_id_for("10.0.0.7"), "relay-box"
    )
    connection.receive_data(identity(1, 1, "other"))
    assert connection.client_info.pid == 77


def test_set_peer_identity_is_ignored_where_the_host_does_not_accept_it() -> None:
    host = Host(accept_peer_identity=False)
    connection = host.connect(RecordingTransport(), peer_address="10.0.0.7:4567")
    connection.receive_data(identity(77, 0, "forged", "relay-box"))
    assert connection.client_info == ClientInfo(1, 0, -1)


def test_machine_id_is_fnv1a_low_32_bits() -> None:
    assert machine_id_for("") == 0x84222325
    assert machine_id_for("a") == 0xAF63DC4C8601EC8C & 0xFFFFFFFF
    assert machine_id_for("foobar") == 0x85944171F73967E8 & 0xFFFFFFFF


valid_frames = [
    bind("ProducerPort"),
    bind("Nope"),
    invoke(11, pp.SyncRequest()),
    invoke(1, pp.InitializeConnectionRequest(producer_name="p")),
    invoke(5, pp.GetAsyncCommandRequest()),
    invoke(10, pp.ActivateTriggersRequest(trigger_names=["raise"])),
    identity(1, 2),
]


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    frames=st.lists(
        st.one_of(
            st.sampled_from(valid_frames),
            st.binary(max_size=64),
            st.binary(max_size=40).map(lambda b: len(b).to_bytes(4, "little") + b),
        ),
        max_size=12,
    ),
    flips=st.lists(st.tuples(st.integers(min_value=0), st.integers(0, 255)), max_size=4),
)
def test_hostile_input_never_escapes_and_spares_other_connections(
    frames: list[bytes], flips: list[tuple[int, int]]
) -> None:
    host = Host()
    host.expose_service(PRODUCER_PORT, Handlers())
    bad, bad_transport = connect(host)
    good, good_transport = connect(host)
    stream = bytearray(b"".join(frames))
    for position, value in flips:
        if stream:
            stream[position % len(stream)] = value
    logging.disable(logging.CRITICAL)
    try:
        bad.receive_data(bytes(stream))
    finally:
        logging.disable(logging.NOTSET)
    assert bad.closed == bad_transport.closed
    good.receive_data(invoke(11, pp.SyncRequest(), request_id=1))
    (reply,) = good_transport.pop()
    assert reply.request_id == 1
    assert reply.msg_invoke_method_reply.success
    assert not good.closed


def test_reply_too_large_for_a_frame_is_rejected_and_reported(
    host: Host, handlers: Handlers
) -> None:
    connection, transport = connect(host)
    connection.receive_data(invoke(method_id("GetAsyncCommand"), pp.GetAsyncCommandRequest()))
    (call,) = handlers.deferred
    huge = pp.GetAsyncCommandResponse()
    huge.setup_data_source.config.name = "x" * MAX_PAYLOAD_SIZE
    with pytest.raises(FrameTooLargeError):
        call.resolve(huge)
    (frame,) = transport.pop()
    assert not frame.msg_invoke_method_reply.success
    assert call.done


def test_host_can_drop_a_client(host: Host, events: list[tuple[str, ClientInfo]]) -> None:
    connection, transport = connect(host)
    assert host.disconnect(connection.client_id, "misbehaving producer")
    assert transport.closed
    assert connection.closed
    assert events[-1][0] == "disconnect"
    assert not host.disconnect(connection.client_id, "again")
