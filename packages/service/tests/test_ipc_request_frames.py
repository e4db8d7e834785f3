"""The exact frames our IPC clients send, against the bytes upstream's clients send.

The expected frames are written out by hand from upstream's clients
(`src/tracing/ipc/{consumer,producer}/*_ipc_client_impl.cc`, `src/ipc/client_impl.cc`):
every call sets `drop_reply` (true exactly when upstream binds no callback), request ids
count from 1 with BindService first, method ids are upstream's 1-based `.proto` order, and a
request carries the fields upstream sets (numbers as upstream sets them, zeros included).
"""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from perfetto_protos.common.commit_data_request_pb2 import CommitDataRequest
from perfetto_protos.common.data_source_descriptor_pb2 import DataSourceDescriptor
from perfetto_protos.config.trace_config_pb2 import TraceConfig
from perfetto_protos.ipc.producer_port_pb2 import InitializeConnectionRequest
from perfetto_protos.ipc.wire_protocol_pb2 import IPCFrame
from perfetto_service import Consumer, ConsumerIPCClient, Producer, ProducerIPCClient
from perfetto_service.ipc._client_base import PortClient
from perfetto_service.ipc.producer._producer_ipc_client import default_sdk_version
from perfetto_testing import wait_for

CONSUMER_METHODS = [
    "EnableTracing",
    "DisableTracing",
    "ReadBuffers",
    "FreeBuffers",
    "Flush",
    "StartTracing",
    "ChangeTraceConfig",
    "Detach",
    "Attach",
    "GetTraceStats",
    "ObserveEvents",
    "QueryServiceState",
    "QueryCapabilities",
    "SaveTraceForBugreport",
    "CloneSession",
]
PRODUCER_METHODS = [
    "InitializeConnection",
    "RegisterDataSource",
    "UnregisterDataSource",
    "CommitData",
    "GetAsyncCommand",
    "RegisterTraceWriter",
    "UnregisterTraceWriter",
    "NotifyDataSourceStarted",
    "NotifyDataSourceStopped",
    "ActivateTriggers",
    "Sync",
    "UpdateDataSource",
]


class SilentProducer(Producer):
    """A producer that keeps every default."""


class SilentConsumer(Consumer):
    """A consumer that keeps every default."""


class RecordingHost:
    """Accepts one client on a UNIX socket, records the frames it sends, answers its calls.

    Every call that asks for a reply gets an empty successful one at once, except the
    methods in `hold` (upstream's service answers those later: EnableTracing at the end of
    the session, GetAsyncCommand with a command).
    """

    def __init__(self, path: str, methods: list[str], hold: set[str]) -> None:
        self._methods = methods
        self._hold = hold
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(path)
        self._listener.listen(1)
        self.frames: list[bytes] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def recorded(self) -> list[bytes]:
        with self._lock:
            return list(self.frames)

    def close(self) -> None:
        self._listener.close()
        self._thread.join(timeout=10)

    def _serve(self) -> None:
        try:
            conn, _ = self._listener.accept()
        except OSError:
            return
        with conn:
            buffer = b""
            while True:
                try:
                    data = conn.recv(65536)
                except OSError:
                    return
                if not data:
                    return
                buffer += data
                while len(buffer) >= 4:
                    (size,) = struct.unpack_from("<I", buffer)
                    if len(buffer) < 4 + size:
                        break
                    frame, buffer = buffer[: 4 + size], buffer[4 + size :]
                    with self._lock:
                        self.frames.append(frame)
                    answer = self._answer(IPCFrame.FromString(frame[4:]))
                    if answer is not None:
                        payload = answer.SerializeToString()
                        conn.sendall(struct.pack("<I", len(payload)) + payload)

    def _answer(self, frame: IPCFrame) -> IPCFrame | None:
        if frame.HasField("msg_bind_service"):
            reply = IPCFrame(request_id=frame.request_id)
            bound = reply.msg_bind_service_reply
            bound.success = True
            bound.service_id = 1
            for number, name in enumerate(self._methods, start=1):
                bound.methods.add(id=number, name=name)
            return reply
        invoke = frame.msg_invoke_method
        if invoke.drop_reply or self._methods[invoke.method_id - 1] in self._hold:
            return None
        reply = IPCFrame(request_id=frame.request_id)
        reply.msg_invoke_method_reply.success = True
        reply.msg_invoke_method_reply.has_more = False
        reply.msg_invoke_method_reply.reply_proto = b""
        return reply


def invoke(request_id: int, method_id: int, args: str, drop_reply: bool) -> bytes:
    """An InvokeMethod frame as upstream's client writes it (all sizes below 128 bytes)."""
    args_bytes = bytes.fromhex(args)
    member = (
        bytes([0x08, 1, 0x10, method_id, 0x1A, len(args_bytes)])
        + args_bytes
        + bytes([0x20, int(drop_reply)])
    )
    payload = bytes([0x10, request_id, 0x2A, len(member)]) + member
    return struct.pack("<I", len(payload)) + payload


def bind(name: str) -> bytes:
    """The BindService frame upstream's client sends first (request id 1)."""
    inner = bytes([0x0A, len(name)]) + name.encode()
    payload = bytes([0x10, 1, 0x1A, len(inner)]) + inner
    return struct.pack("<I", len(payload)) + payload


@pytest.fixture
def socket_path(tmp_path: Path) -> str:
    return str(tmp_path / "port.sock")


def record(
    host: RecordingHost, client: PortClient, calls: Callable[[], object], count: int
) -> list[bytes]:
    """Connects `client`, makes the `calls`, and returns the first `count` frames sent."""
    try:
        client.connect()
        calls()
        wait_for(lambda: len(host.recorded()) >= count)
    finally:
        client.close()
        host.close()
    return host.recorded()


def test_consumer_calls_are_upstreams_frames(socket_path: str) -> None:
    host = RecordingHost(socket_path, CONSUMER_METHODS, {"EnableTracing", "ObserveEvents"})
    consumer = ConsumerIPCClient(socket_path, SilentConsumer())
    config = TraceConfig(duration_ms=1000)
    config.buffers.add(size_kb=1024)

    def calls() -> None:
        consumer.enable_tracing(config)
        consumer.change_trace_config(config)
        consumer.start_tracing()
        consumer.flush(5000, lambda _ok: None)
        consumer.disable_tracing()
        consumer.read_buffers()
        consumer.free_buffers()
        consumer.detach("k")
        consumer.attach("k")
        consumer.get_trace_stats()
        consumer.observe_events(0b11)
        consumer.query_service_state(False, lambda _ok, _state: None)
        consumer.query_capabilities(lambda _caps: None)

    # Attach's empty reply is a success: it is followed by EnableTracing
    # (attach_notification_only), as upstream's consumer does.
    frames = record(host, consumer, calls, 15)
    config_bytes = "0a0308800818e807"  # buffers {size_kb: 1024}, duration_ms: 1000
    expected = [
        bind("ConsumerPort"),
        invoke(2, 1, "0a08" + config_bytes, False),  # EnableTracing {trace_config}
        invoke(3, 7, "0a08" + config_bytes, False),  # ChangeTraceConfig {trace_config}
        invoke(4, 6, "", False),  # StartTracing
        invoke(5, 5, "08882710 00".replace(" ", ""), False),  # Flush {5000, flags 0}
        invoke(6, 2, "", False),  # DisableTracing
        invoke(7, 3, "", False),  # ReadBuffers
        invoke(8, 4, "", False),  # FreeBuffers
        invoke(9, 8, "0a016b", False),  # Detach {key}
        invoke(10, 9, "0a016b", False),  # Attach {key}
        invoke(11, 10, "", False),  # GetTraceStats
        invoke(12, 11, "08010802", False),  # ObserveEvents {1, 2}
        invoke(13, 12, "0800", False),  # QueryServiceState {sessions_only: false}
        invoke(14, 13, "", False),  # QueryCapabilities
        invoke(15, 1, "1001", False),  # EnableTracing {attach_notification_only}
    ]
    assert sorted(frames[:10]) == sorted(expected[:10])
    assert frames[:10] == expected[:10]
    # Attach's follow-up may come before the calls made after Attach, and then takes one of
    # their request ids: the last five are the same frames, numbered 11 to 15 in any order.
    tail = frames[10:]
    assert sorted(frame[5] for frame in tail) == list(range(11, 16))
    assert sorted(map(_without_request_id, tail)) == sorted(map(_without_request_id, expected[10:]))


def _without_request_id(frame: bytes) -> bytes:
    """An `invoke` frame without its one-byte request id (the byte after the 0x10 tag)."""
    assert frame[4] == 0x10
    return frame[:5] + frame[6:]


def test_large_nested_messages_get_upstreams_four_byte_sizes(socket_path: str) -> None:
    # Upstream's client serializes the request and the frame with its protozero-based
    # generated classes: a nested message's size is reserved as 4 bytes and shrunk to one
    # byte only when the message has at most 127 bytes; above that it stays a 4-byte varint
    # padded with continuation bits (153 is 99 81 80 00).
    host = RecordingHost(socket_path, CONSUMER_METHODS, {"EnableTracing"})
    consumer = ConsumerIPCClient(socket_path, SilentConsumer())
    config = TraceConfig()
    config.buffers.add(size_kb=1024)
    config.data_sources.add().config.name = "n" * 150

    frames = record(host, consumer, lambda: consumer.enable_tracing(config), 2)
    name = "0a9601" + "6e" * 150  # DataSourceConfig.name: a string, minimal length
    data_source = "0a 99818000".replace(" ", "") + name  # DataSource {config: 153 bytes}
    trace_config = "0a0308800812 9e818000".replace(" ", "") + data_source  # 158-byte source
    args = "0a a8818000".replace(" ", "") + trace_config  # EnableTracing {168-byte config}
    member = "0801 1001 1aad01".replace(" ", "") + args + "2000"  # InvokeMethod, 182 bytes
    payload = bytes.fromhex("1002 2a b6818000".replace(" ", "") + member)
    assert frames == [bind("ConsumerPort"), struct.pack("<I", len(payload)) + payload]


def test_producer_calls_are_upstreams_frames(socket_path: str) -> None:
    host = RecordingHost(socket_path, PRODUCER_METHODS, {"GetAsyncCommand"})
    producer = ProducerIPCClient(
        socket_path, SilentProducer(), "p", shm_size_hint_bytes=0, sdk_version="v"
    )

    def calls() -> None:
        producer.register_data_source(DataSourceDescriptor(name="d"))
        producer.update_data_source(DataSourceDescriptor(name="d"))
        producer.unregister_data_source("d")
        producer.register_trace_writer(1, 2)
        producer.unregister_trace_writer(1)
        producer.commit_data(CommitDataRequest(flush_request_id=7))
        producer.commit_data(CommitDataRequest(flush_request_id=8), lambda: None)
        producer.notify_data_source_started(3)
        producer.notify_data_source_stopped(3)
        producer.activate_triggers(["t"])
        producer.sync(lambda: None)

    frames = record(host, producer, calls, 14)
    expected = [
        bind("ProducerPort"),
        # InitializeConnection {page size hint 0, size hint 0, name, SMB scraping enabled,
        # sdk_version}: upstream's SDK sets the scraping mode to enabled.
        invoke(2, 1, "080010001a01702001420176", False),
        invoke(3, 5, "", False),  # GetAsyncCommand, right behind it
        invoke(4, 2, "0a030a0164", False),  # RegisterDataSource {descriptor {name}}
        invoke(5, 12, "0a030a0164", False),  # UpdateDataSource
        invoke(6, 3, "0a0164", True),  # UnregisterDataSource {name}
        invoke(7, 6, "08011002", True),  # RegisterTraceWriter {1, buffer 2}
        invoke(8, 7, "0801", True),  # UnregisterTraceWriter {1}
        invoke(9, 4, "1807", True),  # CommitData {flush_request_id 7}, no callback
        invoke(10, 4, "1808", False),  # CommitData with a callback
        invoke(11, 8, "0803", True),  # NotifyDataSourceStarted {3}
        invoke(12, 9, "0803", True),  # NotifyDataSourceStopped {3}
        invoke(13, 10, "0a0174", True),  # ActivateTriggers {"t"}
        invoke(14, 11, "", False),  # Sync
    ]
    assert frames == expected


def test_producer_default_initialize_connection_names_the_sdk(socket_path: str) -> None:
    host = RecordingHost(socket_path, PRODUCER_METHODS, {"GetAsyncCommand"})
    producer = ProducerIPCClient(socket_path, SilentProducer(), "p")
    frames = record(host, producer, list, 3)
    init = IPCFrame.FromString(frames[1][4:]).msg_invoke_method
    request = InitializeConnectionRequest.FromString(init.args_proto)
    assert request.sdk_version == default_sdk_version()
    assert request.sdk_version.startswith("perfetto-py 0.")
    assert request.smb_scraping_mode == InitializeConnectionRequest.SMB_SCRAPING_ENABLED
    assert not request.HasField("producer_provided_shmem")
