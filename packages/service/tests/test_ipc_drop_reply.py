"""traced answers exactly the calls that ask for an answer, whatever upstream's clients do.

Upstream's clients set `drop_reply` on some calls and not on others, and treat a reply to a
call that asked for none as a fatal bug. The service must not assume which calls come with
it: a call that asks for a reply gets one, a call that does not gets none.
"""

from __future__ import annotations

import socket
import struct
import tempfile
from collections.abc import Iterator

import pytest
from google.protobuf.message import Message
from perfetto_protos.common.data_source_descriptor_pb2 import DataSourceDescriptor
from perfetto_protos.ipc import consumer_port_pb2, producer_port_pb2
from perfetto_protos.ipc.wire_protocol_pb2 import IPCFrame
from perfetto_testing import TIMEOUT
from traced_testlib import Traced


class RawClient:
    """One blocking connection that writes IPCFrames by hand and reads what comes back."""

    def __init__(self, path: str, service: str) -> None:
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.settimeout(TIMEOUT)
        self._sock.connect(path)
        self._buffer = b""
        self._request_id = 0
        bind = IPCFrame(request_id=self._next_id())
        bind.msg_bind_service.service_name = service
        self._send(bind)
        reply = self.receive().msg_bind_service_reply
        assert reply.success
        self._service_id = reply.service_id
        self._methods = {method.name: method.id for method in reply.methods}

    def close(self) -> None:
        self._sock.close()

    def _next_id(self) -> int:
        self._request_id += 1
        return self._request_id

    def _send(self, frame: IPCFrame) -> None:
        payload = frame.SerializeToString()
        self._sock.sendall(struct.pack("<I", len(payload)) + payload)

    def call(self, method: str, request: Message, *, drop_reply: bool) -> int:
        """Sends one InvokeMethod; returns its request id."""
        frame = IPCFrame(request_id=self._next_id())
        invoke = frame.msg_invoke_method
        invoke.service_id = self._service_id
        invoke.method_id = self._methods[method]
        invoke.args_proto = request.SerializeToString()
        invoke.drop_reply = drop_reply
        self._send(frame)
        return frame.request_id

    def receive(self) -> IPCFrame:
        while len(self._buffer) < 4 or len(self._buffer) < 4 + _size(self._buffer):
            data = self._sock.recv(65536)
            assert data, "traced hung up"
            self._buffer += data
        end = 4 + _size(self._buffer)
        frame, self._buffer = self._buffer[4:end], self._buffer[end:]
        return IPCFrame.FromString(frame)

    def final_reply(self) -> IPCFrame:
        """The next reply that ends a call (stream replies with has_more are skipped)."""
        while True:
            frame = self.receive()
            if not frame.msg_invoke_method_reply.has_more:
                return frame


def _size(buffer: bytes) -> int:
    size: int = struct.unpack_from("<I", buffer)[0]
    return size


@pytest.fixture
def traced() -> Iterator[Traced]:
    with tempfile.TemporaryDirectory() as directory, Traced(directory) as daemon:
        yield daemon


def _producer(traced: Traced) -> RawClient:
    client = RawClient(traced.producer_socket, "ProducerPort")
    request = producer_port_pb2.InitializeConnectionRequest(producer_name="raw")
    init = client.call("InitializeConnection", request, drop_reply=False)
    reply = client.receive()
    assert reply.request_id == init
    assert reply.msg_invoke_method_reply.success
    return client


PRODUCER_CALLS: list[tuple[str, Message]] = [
    (
        "RegisterDataSource",
        producer_port_pb2.RegisterDataSourceRequest(
            data_source_descriptor=DataSourceDescriptor(name="raw.ds")
        ),
    ),
    (
        "UpdateDataSource",
        producer_port_pb2.UpdateDataSourceRequest(
            data_source_descriptor=DataSourceDescriptor(name="raw.ds")
        ),
    ),
    ("RegisterTraceWriter", producer_port_pb2.RegisterTraceWriterRequest(trace_writer_id=1)),
    ("UnregisterTraceWriter", producer_port_pb2.UnregisterTraceWriterRequest(trace_writer_id=1)),
    ("NotifyDataSourceStarted", producer_port_pb2.NotifyDataSourceStartedRequest()),
    ("NotifyDataSourceStopped", producer_port_pb2.NotifyDataSourceStoppedRequest()),
    ("ActivateTriggers", producer_port_pb2.ActivateTriggersRequest(trigger_names=["t"])),
    ("UnregisterDataSource", producer_port_pb2.UnregisterDataSourceRequest()),
]

CONSUMER_CALLS: list[tuple[str, Message]] = [
    ("ChangeTraceConfig", consumer_port_pb2.ChangeTraceConfigRequest()),
    ("StartTracing", consumer_port_pb2.StartTracingRequest()),
    ("DisableTracing", consumer_port_pb2.DisableTracingRequest()),
    ("FreeBuffers", consumer_port_pb2.FreeBuffersRequest()),
    ("GetTraceStats", consumer_port_pb2.GetTraceStatsRequest()),
    ("Detach", consumer_port_pb2.DetachRequest(key="nothing")),
    ("Attach", consumer_port_pb2.AttachRequest(key="nothing")),
    ("Flush", consumer_port_pb2.FlushRequest(timeout_ms=100)),
]


def test_producer_calls_asking_for_a_reply_get_one(traced: Traced) -> None:
    client = _producer(traced)
    try:
        for method, request in PRODUCER_CALLS:
            request_id = client.call(method, request, drop_reply=False)
            reply = client.final_reply()
            assert reply.request_id == request_id, method
    finally:
        client.close()


def test_producer_calls_with_drop_reply_get_none(traced: Traced) -> None:
    client = _producer(traced)
    try:
        for method, request in PRODUCER_CALLS:
            client.call(method, request, drop_reply=True)
        sync = client.call("Sync", producer_port_pb2.SyncRequest(), drop_reply=False)
        assert client.receive().request_id == sync
    finally:
        client.close()


def test_consumer_calls_asking_for_a_reply_get_one(traced: Traced) -> None:
    client = RawClient(traced.consumer_socket, "ConsumerPort")
    try:
        for method, request in CONSUMER_CALLS:
            request_id = client.call(method, request, drop_reply=False)
            assert client.final_reply().request_id == request_id, method
    finally:
        client.close()


def test_consumer_calls_with_drop_reply_get_none(traced: Traced) -> None:
    client = RawClient(traced.consumer_socket, "ConsumerPort")
    try:
        for method, request in CONSUMER_CALLS:
            client.call(method, request, drop_reply=True)
        request = consumer_port_pb2.QueryCapabilitiesRequest()
        query = client.call("QueryCapabilities", request, drop_reply=False)
        assert client.receive().request_id == query
    finally:
        client.close()
