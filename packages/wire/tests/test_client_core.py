"""The sans-I/O client: request ids, binding, invoking, streams, errors, fds."""

from __future__ import annotations

import os

import pytest
from perfetto_protos.ipc import producer_port_pb2 as pp
from perfetto_protos.ipc.wire_protocol_pb2 import IPCFrame
from perfetto_wire import (
    ConnectionClosedError,
    Deferred,
    FrameDecoder,
    Host,
    MethodNotAvailableError,
    Reply,
    RequestRejectedError,
    ServiceDescriptor,
    ServiceProxy,
    WireError,
    encode_frame,
)
from perfetto_wire._client import ClientConnection
from perfetto_wire._endpoint import FrameEndpoint

PRODUCER_PORT = ServiceDescriptor.for_service("ProducerPort")


class WireTap:
    """Records what the client writes (decoded) and can hand it to a peer core."""

    def __init__(self) -> None:
        self.decoder = FrameDecoder()
        self.frames: list[IPCFrame] = []
        self.fds: list[int | None] = []
        self.closed = False

    def send(self, data: bytes, fd: int | None = None) -> None:
        new = self.decoder.feed(data)
        self.frames += new
        self.fds += [fd] * len(new)

    def close(self) -> None:
        self.closed = True


class CoreLink:
    """Writes into another protocol core as a socket would (fds duplicated like SCM_RIGHTS)."""

    def __init__(self) -> None:
        self.peer: FrameEndpoint | None = None

    def send(self, data: bytes, fd: int | None = None) -> None:
        assert self.peer is not None
        self.peer.receive_data(data, os.dup(fd) if fd is not None else None)

    def close(self) -> None:
        """Nothing to release."""


def pair(host: Host) -> ClientConnection:
    """A client core wired to a host core in memory."""
    to_client, to_host = CoreLink(), CoreLink()
    to_host.peer = host.connect(to_client, uid=1, pid=2)
    client = ClientConnection(to_host)
    to_client.peer = client
    return client


def bound(client: ClientConnection, service: str = "ProducerPort") -> ServiceProxy:
    results: list[ServiceProxy | None] = []
    client.bind(service, results.append)
    (proxy,) = results
    assert proxy is not None
    return proxy


def sync_handler(request: pp.SyncRequest, call: Deferred) -> pp.SyncResponse:
    return pp.SyncResponse()


def test_request_ids_start_at_one_and_are_shared_by_bind_and_invoke() -> None:
    tap = WireTap()
    client = ClientConnection(tap)
    assert client.bind("ProducerPort", lambda proxy: None) == 1
    proxy = ServiceProxy(client, PRODUCER_PORT, 1, {"Sync": 11})
    assert client.invoke(proxy, "Sync", pp.SyncRequest(), lambda reply: None) == 2
    assert client.bind("ConsumerPort", lambda proxy: None) == 3
    assert [frame.request_id for frame in tap.frames] == [1, 2, 3]
    assert tap.frames[1].msg_invoke_method.method_id == 11
    assert not tap.frames[1].msg_invoke_method.drop_reply


def test_invoke_without_callback_asks_for_no_reply() -> None:
    tap = WireTap()
    client = ClientConnection(tap)
    proxy = ServiceProxy(client, PRODUCER_PORT, 1, {"Sync": 11})
    client.invoke(proxy, "Sync", pp.SyncRequest(), None)
    assert tap.frames[0].msg_invoke_method.drop_reply
    assert client.pending_requests == 0


def test_bind_and_invoke_through_a_host() -> None:
    host = Host()
    host.expose_service(PRODUCER_PORT, {"Sync": sync_handler})
    client = pair(host)
    proxy = bound(client)
    assert proxy.service_id == 1
    assert proxy.remote_methods["Sync"] == 11
    replies: list[Reply] = []
    client.invoke(proxy, "Sync", pp.SyncRequest(), replies.append)
    assert replies == [Reply(True, False, pp.SyncResponse())]
    assert replies[0].unwrap(pp.SyncResponse) == pp.SyncResponse()


def test_method_missing_from_an_older_host_is_rejected_without_sending() -> None:
    host = Host()
    host.expose_service(PRODUCER_PORT.truncated(10), {})
    client = pair(host)
    proxy = bound(client)
    assert not proxy.has_method("Sync")
    assert proxy.has_method("ActivateTriggers")
    requests_before = client.pending_requests
    with pytest.raises(MethodNotAvailableError, match="does not offer Sync"):
        client.invoke(proxy, "Sync", pp.SyncRequest(), lambda reply: None)
    assert client.pending_requests == requests_before

    tap = WireTap()
    older = ClientConnection(tap)
    older_proxy = ServiceProxy(older, PRODUCER_PORT, 1, {"ActivateTriggers": 10})
    with pytest.raises(MethodNotAvailableError):
        older.invoke(older_proxy, "Sync", pp.SyncRequest(), lambda reply: None)
    assert tap.frames == []


def test_unknown_method_name_and_wrong_request_type_are_refused() -> None:
    tap = WireTap()
    client = ClientConnection(tap)
    proxy = ServiceProxy(client, PRODUCER_PORT, 1, {"Sync": 11, "Bogus": 13})
    with pytest.raises(MethodNotAvailableError, match="no method Bogus"):
        client.invoke(proxy, "Bogus", pp.SyncRequest(), None)
    with pytest.raises(WireError, match="takes SyncRequest"):
        client.invoke(proxy, "Sync", pp.CommitDataResponse(), None)
    assert tap.frames == []


def test_bind_of_a_service_the_host_lacks_gives_none() -> None:
    client = pair(Host())
    results: list[ServiceProxy | None] = []
    client.bind("ProducerPort", results.append)
    assert results == [None]


def reply_frame(request_id: int, *, success: bool = True, has_more: bool = False) -> bytes:
    frame = IPCFrame(request_id=request_id)
    reply = frame.msg_invoke_method_reply
    reply.success = success
    reply.has_more = has_more
    reply.reply_proto = b""
    return encode_frame(frame)


def started_invoke(tap: WireTap) -> tuple[ClientConnection, list[Reply]]:
    client = ClientConnection(tap)
    proxy = ServiceProxy(client, PRODUCER_PORT, 1, {"GetAsyncCommand": 5})
    replies: list[Reply] = []
    client.invoke(proxy, "GetAsyncCommand", pp.GetAsyncCommandRequest(), replies.append)
    return client, replies


def test_streamed_replies_keep_the_request_until_the_last() -> None:
    client, replies = started_invoke(WireTap())
    client.receive_data(reply_frame(1, has_more=True) + reply_frame(1, has_more=True))
    assert client.pending_requests == 1
    client.receive_data(reply_frame(1))
    client.receive_data(reply_frame(1))  # after the end: unknown request, ignored
    assert [reply.has_more for reply in replies] == [True, True, False]
    assert client.pending_requests == 0


def test_replies_for_unknown_request_ids_are_ignored() -> None:
    client, replies = started_invoke(WireTap())
    client.receive_data(reply_frame(99) + reply_frame(0))
    assert replies == []
    assert client.pending_requests == 1


def test_request_error_drops_the_request() -> None:
    client, replies = started_invoke(WireTap())
    frame = IPCFrame(request_id=1)
    frame.msg_request_error.error = "unknown request"
    client.receive_data(encode_frame(frame))
    assert replies == [Reply(False, False, None)]
    assert client.pending_requests == 0
    with pytest.raises(RequestRejectedError):
        replies[0].unwrap(pp.GetAsyncCommandResponse)


def test_failed_and_undecodable_replies_are_failures() -> None:
    client, replies = started_invoke(WireTap())
    frame = IPCFrame(request_id=1)
    frame.msg_invoke_method_reply.success = True
    frame.msg_invoke_method_reply.has_more = True
    frame.msg_invoke_method_reply.reply_proto = b"\xff\xff"
    client.receive_data(encode_frame(frame) + reply_frame(1, success=False))
    assert replies == [Reply(False, True, None), Reply(False, False, None)]


def test_connection_lost_rejects_everything_pending() -> None:
    tap = WireTap()
    client, replies = started_invoke(tap)
    binds: list[ServiceProxy | None] = []
    client.bind("ProducerPort", binds.append)
    client.connection_lost()
    assert replies == [Reply(False, False, None)]
    assert binds == [None]
    with pytest.raises(ConnectionClosedError):
        client.bind("ProducerPort", binds.append)


def test_oversize_frame_from_the_host_closes_the_connection() -> None:
    tap = WireTap()
    client, replies = started_invoke(tap)
    client.receive_data(b"\xff\xff\xff\xff")
    assert tap.closed
    assert client.closed
    assert replies == [Reply(False, False, None)]


def test_fd_arrives_with_its_reply() -> None:
    client, replies = started_invoke(WireTap())
    read_end, write_end = os.pipe()
    try:
        first, second = reply_frame(1, has_more=True), reply_frame(1, has_more=True)
        client.receive_data(first + second[:2], write_end)
        client.receive_data(second[2:])
        assert [reply.fd for reply in replies] == [None, write_end]
    finally:
        os.close(read_end)
        os.close(write_end)


def test_fd_for_an_unknown_request_is_closed() -> None:
    client, _ = started_invoke(WireTap())
    read_end, write_end = os.pipe()
    try:
        client.receive_data(reply_frame(42), write_end)
        with pytest.raises(OSError, match="Bad file descriptor"):
            os.fstat(write_end)
    finally:
        os.close(read_end)


def test_fd_sent_with_a_request_reaches_the_host_handler() -> None:
    seen: list[bool] = []

    def initialize(
        request: pp.InitializeConnectionRequest, call: Deferred
    ) -> pp.InitializeConnectionResponse:
        fd = call.take_received_fd()
        seen.append(fd is not None)
        if fd is not None:
            os.close(fd)
        return pp.InitializeConnectionResponse(using_shmem_provided_by_producer=fd is not None)

    host = Host()
    host.expose_service(PRODUCER_PORT, {"InitializeConnection": initialize})
    client = pair(host)
    proxy = bound(client)
    replies: list[Reply] = []
    read_end, write_end = os.pipe()
    try:
        request = pp.InitializeConnectionRequest(producer_provided_shmem=True)
        client.invoke(proxy, "InitializeConnection", request, replies.append, fd=write_end)
    finally:
        os.close(read_end)
        os.close(write_end)
    assert seen == [True]
    assert replies[0].unwrap(pp.InitializeConnectionResponse).using_shmem_provided_by_producer


def test_set_peer_identity_bytes_match_traced_relay() -> None:
    tap = WireTap()
    client = ClientConnection(tap)
    client.set_peer_identity(pid=7, uid=1000, machine_id_hint="hint", machine_name="vm")
    (frame,) = tap.frames
    assert frame.SerializeToString() == bytes.fromhex("1000 420f 0807 10e807 1a0468696e74 2202766d")
    assert client.bind("ProducerPort", lambda proxy: None) == 1
