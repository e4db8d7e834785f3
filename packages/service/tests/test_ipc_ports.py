"""The IPC ports and client proxies over real sockets, against a scripted service."""

from __future__ import annotations

import os
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, cast

import pytest
from ipc_fakes import FakeService, HostThread, RecordingConsumer, RecordingProducer
from perfetto_protos.common.data_source_descriptor_pb2 import DataSourceDescriptor
from perfetto_protos.common.observable_events_pb2 import ObservableEvents
from perfetto_protos.common.tracing_service_capabilities_pb2 import TracingServiceCapabilities
from perfetto_protos.common.tracing_service_state_pb2 import TracingServiceState
from perfetto_protos.config.data_source_config_pb2 import DataSourceConfig
from perfetto_protos.config.trace_config_pb2 import TraceConfig
from perfetto_protos.ipc import consumer_port_pb2, producer_port_pb2
from perfetto_service import ConsumerIPCClient, ProducerIPCClient, ServiceError
from perfetto_service.core._read_slicer import IPC_BUFFER_SIZE
from perfetto_service.ipc.service._consumer_port import split_service_state
from perfetto_service.ipc.service._producer_port import RemoteProducer
from perfetto_smb import SharedMemory, SharedMemoryABI, SharedMemoryReader
from perfetto_testing import wait_for
from perfetto_wire import Client, ClientInfo, Reply, RequestRejectedError, WireError


@pytest.fixture
def sockets() -> Iterator[tuple[str, str]]:
    with tempfile.TemporaryDirectory() as directory:
        yield f"{directory}/producer", f"{directory}/consumer"


@pytest.fixture
def host(sockets: tuple[str, str]) -> Iterator[HostThread]:
    thread = HostThread(FakeService(), *sockets)
    yield thread
    thread.close()


def _connect_producer(
    host: HostThread, socket: str, **kwargs: object
) -> tuple[ProducerIPCClient, RecordingProducer]:
    producer = RecordingProducer()
    client = ProducerIPCClient(socket, producer, "test.producer", **kwargs)  # type: ignore[arg-type]
    client.connect()
    assert client.wait_connected(10)
    assert producer.connected.wait(10)
    return client, producer


def test_producer_rpcs_reach_the_endpoint_with_peer_credentials(
    host: HostThread, sockets: tuple[str, str]
) -> None:
    client, producer = _connect_producer(
        host, sockets[0], shm_size_hint_bytes=65536, shm_page_size_hint_bytes=8192
    )
    try:
        wait_for(lambda: host.service.producers)
        endpoint = host.service.producers[0]
        assert endpoint.identity.uid == os.getuid()
        assert endpoint.identity.pid == os.getpid()
        assert endpoint.kwargs["name"] == "test.producer"
        assert endpoint.kwargs["shm_size_hint_bytes"] == 65536
        assert endpoint.kwargs["shm_page_size_hint_bytes"] == 8192
        client.register_data_source(DataSourceDescriptor(name="ds.one"))
        client.update_data_source(DataSourceDescriptor(name="ds.one"))
        client.register_trace_writer(3, 2)
        client.unregister_trace_writer(3)
        client.notify_data_source_started(11)
        client.notify_data_source_stopped(11)
        client.activate_triggers(["a", "b"])
        client.unregister_data_source("ds.one")
        synced: list[bool] = []
        client.sync(lambda: synced.append(True))
        wait_for(lambda: synced)
        assert endpoint.calls == [
            ("register_data_source", "ds.one"),
            ("update_data_source", "ds.one"),
            ("register_trace_writer", (3, 2)),
            ("unregister_trace_writer", 3),
            ("notify_data_source_started", 11),
            ("notify_data_source_stopped", 11),
            ("activate_triggers", ["a", "b"]),
            ("unregister_data_source", "ds.one"),
            ("sync", None),
        ]
    finally:
        client.disconnect()
    wait_for(lambda: "disconnect" in endpoint.names())
    assert producer.disconnected.is_set()


def test_commands_smb_and_commits(host: HostThread, sockets: tuple[str, str]) -> None:
    client, producer = _connect_producer(host, sockets[0])
    try:
        wait_for(lambda: host.service.producers)
        endpoint = host.service.producers[0]
        shm = SharedMemory.create(64 * 1024)
        endpoint.shm = shm
        config = DataSourceConfig(name="ds", target_buffer=1)
        # A sub-config this code does not model must reach the producer byte for byte.
        raw_config = config.SerializeToString() + b"\xfa\x3e\x03\x08\x96\x01"
        config = DataSourceConfig.FromString(raw_config)

        def start() -> None:
            remote = endpoint.producer
            remote.on_tracing_setup()
            remote.setup_data_source(5, config)
            remote.start_data_source(5, config)
            remote.start_data_source(6, config)
            remote.clear_incremental_state([5, 6])
            remote.flush(77, [5], 1)
            remote.stop_data_source(6)

        host.call(start)
        wait_for(lambda: "stop_data_source" in producer.names())
        assert producer.events[1:] == [
            ("on_tracing_setup", None),
            ("setup_data_source", (5, raw_config)),
            ("start_data_source", (5, raw_config)),
            ("setup_data_source", (6, raw_config)),
            ("start_data_source", (6, raw_config)),
            ("clear_incremental_state", [5, 6]),
            ("flush", (77, [5], 1)),
            ("stop_data_source", 6),
        ]
        mapped = client.shared_memory()
        assert mapped is not None
        assert mapped.size == shm.size
        assert client.shared_buffer_page_size_kb() == 4

        writer = client.create_trace_writer(1)
        for number in range(50):
            writer.write_packet(b"\x0a\x08" + f"pkt-{number:04d}".encode())
        writer.flush()
        client.notify_flush_complete(77)
        wait_for(lambda: any(c.flush_request_id == 77 for c in endpoint.values("commit_data")))
        commits = endpoint.values("commit_data")
        moves = [move for commit in commits for move in commit.chunks_to_move]
        assert moves
        assert all(move.target_buffer == 1 for move in moves)
        assert ("register_trace_writer", (writer.writer_id, 1)) in endpoint.calls
        reader = SharedMemoryReader(_abi_of(shm))
        payload = b"".join(
            chunk.payload
            for move in moves
            if (chunk := reader.read_chunk(move.page, move.chunk)) is not None
        )
        for number in range(50):
            assert f"pkt-{number:04d}".encode() in payload
        writer.close()
    finally:
        client.disconnect()


def _abi_of(shm: SharedMemory) -> SharedMemoryABI:
    return SharedMemoryABI(shm.buffer, 4096)


def test_trace_writer_needs_setup(host: HostThread, sockets: tuple[str, str]) -> None:
    client, _producer = _connect_producer(host, sockets[0])
    try:
        with pytest.raises(ServiceError, match="not set up"):
            client.create_trace_writer(1)
    finally:
        client.disconnect()


def test_producer_provided_smb_is_adopted(sockets: tuple[str, str]) -> None:
    host = HostThread(FakeService(adopt_producer_shm=True), *sockets)
    try:
        own = SharedMemory.create(32 * 1024)
        client, producer = _connect_producer(
            host, sockets[0], producer_shm=own, shm_page_size_hint_bytes=4096
        )
        wait_for(lambda: host.service.producers)
        endpoint = host.service.producers[0]
        received = endpoint.kwargs["shm"]
        assert received is not None
        assert received.sealed
        own.buffer[100:104] = b"ping"
        assert bytes(received.buffer[100:104]) == b"ping"
        assert client.shared_memory() is own
        assert client.arbiter is not None
        host.call(endpoint.producer.on_tracing_setup)
        assert producer.setup.wait(10)
        writer = client.create_trace_writer(1)
        writer.write_packet(b"\x0a\x02hi")
        writer.close()
        client.disconnect()
    finally:
        host.close()


def test_refused_producer_is_disconnected(host: HostThread, sockets: tuple[str, str]) -> None:
    producer = RecordingProducer()
    client = ProducerIPCClient(sockets[0], producer, "refused")
    client.connect()
    try:
        assert not client.wait_connected(10)
        assert producer.disconnected.wait(10)
        assert "on_connect" not in producer.names()
    finally:
        client.close()


def _ipc_threads() -> int:
    names = ("perfetto-consumer", "perfetto-producer")
    return sum(thread.name in names for thread in threading.enumerate())


def test_construction_neither_starts_a_thread_nor_connects(sockets: tuple[str, str]) -> None:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(sockets[1])
    listener.listen(2)
    listener.settimeout(0.3)
    before = _ipc_threads()
    consumer = ConsumerIPCClient(sockets[1], RecordingConsumer())
    producer = ProducerIPCClient(sockets[1], RecordingProducer(), "p")
    try:
        assert _ipc_threads() <= before
        with pytest.raises(TimeoutError):
            listener.accept()
        consumer.connect()
        listener.settimeout(10)
        listener.accept()[0].close()
    finally:
        consumer.close()
        producer.close()
        listener.close()
    with pytest.raises(WireError, match="empty socket name"):
        ConsumerIPCClient("", RecordingConsumer())


def test_missing_service_reports_disconnect(sockets: tuple[str, str]) -> None:
    producer = RecordingProducer()
    client = ProducerIPCClient(sockets[0] + ".none", producer, "p")
    time.sleep(0.2)
    assert not producer.disconnected.is_set()
    client.connect()
    assert not client.wait_connected(10)
    assert producer.disconnected.wait(10)
    client.close()


def test_the_first_attempt_tells_whether_a_service_listens(
    host: HostThread, sockets: tuple[str, str]
) -> None:
    missing = ProducerIPCClient(sockets[0] + ".none", RecordingProducer(), "p", retry=True)
    missing.connect()
    try:
        assert missing.unix_socket
        assert missing.first_attempt_failed(10)
        assert not missing.connected  # still trying
    finally:
        missing.close()
    client, _ = _connect_producer(host, sockets[0], retry=True)
    try:
        assert not client.first_attempt_failed(10)
        assert len(host.service.producers) == 1
    finally:
        client.close()
    assert not ProducerIPCClient("127.0.0.1:1", RecordingProducer(), "p").unix_socket


def test_calls_before_initialize_and_repeat_initialize_are_rejected(
    host: HostThread, sockets: tuple[str, str]
) -> None:
    client = Client(sockets[0])
    try:
        port = client.bind("ProducerPort").result(10)
        request = producer_port_pb2.RegisterDataSourceRequest()
        request.data_source_descriptor.name = "early"
        with pytest.raises(RequestRejectedError):
            client.invoke(port, "RegisterDataSource", request).result(10)
        with pytest.raises(RequestRejectedError):
            client.invoke(
                port, "GetAsyncCommand", producer_port_pb2.GetAsyncCommandRequest()
            ).result(10)
        init = producer_port_pb2.InitializeConnectionRequest(producer_name="raw")
        reply = client.invoke(port, "InitializeConnection", init).result(10)
        response = reply.unwrap(producer_port_pb2.InitializeConnectionResponse)
        assert response.direct_smb_patching_supported
        assert not response.using_shmem_provided_by_producer
        with pytest.raises(RequestRejectedError):
            client.invoke(port, "InitializeConnection", init).result(10)
        assert len(host.service.producers) == 1
        assert host.service.producers[0].calls == []
    finally:
        client.close()


def test_commands_wait_for_get_async_command(host: HostThread, sockets: tuple[str, str]) -> None:
    client = Client(sockets[0])
    try:
        port = client.bind("ProducerPort").result(10)
        init = producer_port_pb2.InitializeConnectionRequest(producer_name="raw")
        client.invoke(port, "InitializeConnection", init).result(10)
        endpoint = host.service.producers[0]
        endpoint.shm = SharedMemory.create(16 * 1024)
        config = DataSourceConfig(name="queued")
        host.call(endpoint.producer.on_tracing_setup)
        host.call(lambda: endpoint.producer.start_data_source(9, config))
        replies: list[Reply] = []
        client.invoke(
            port,
            "GetAsyncCommand",
            producer_port_pb2.GetAsyncCommandRequest(),
            on_reply=replies.append,
        )
        wait_for(lambda: len(replies) == 2)
        setup, start = replies
        assert setup.has_more
        assert setup.fd is not None
        assert os.fstat(setup.fd).st_size == 16 * 1024
        os.close(setup.fd)
        command = start.unwrap(producer_port_pb2.GetAsyncCommandResponse)
        assert command.start_data_source.new_instance_id == 9
        assert command.start_data_source.config.name == "queued"
    finally:
        client.close()


def test_consumer_round_trip(host: HostThread, sockets: tuple[str, str]) -> None:
    consumer = RecordingConsumer()
    client = ConsumerIPCClient(sockets[1], consumer)
    client.connect()
    try:
        config = TraceConfig(duration_ms=1234, write_into_file=True)
        with tempfile.TemporaryFile() as output:
            client.enable_tracing(config, output.fileno())
            wait_for(lambda: host.service.consumers and host.service.consumers[0].calls)
            endpoint = host.service.consumers[0]
            assert endpoint.uid == os.getuid()
            name, fd = endpoint.calls[0]
            assert name == "enable_tracing"
            assert fd is not None
            os.write(fd, b"through the passed fd")
            os.close(fd)
            output.seek(0)
            assert output.read() == b"through the passed fd"
        assert endpoint.config.duration_ms == 1234
        # Packets bigger than one IPC frame, and many small ones, come back whole.
        big = bytes(range(256)) * 2000
        endpoint.packets = [[b"\x0a\x03abc", b"\x18\x01"], [big[:70000], big[70000:]]]
        endpoint.packets += [[f"small-{n}".encode()] for n in range(3000)]
        client.read_buffers()
        assert consumer.read_done.wait(10)
        assert consumer.packets[0] == b"\x0a\x03abc\x18\x01"
        assert consumer.packets[1] == big
        assert consumer.packets[2:] == [f"small-{n}".encode() for n in range(3000)]
        flushes: list[bool] = []
        client.flush(1000, flushes.append)
        client.flush(1, flushes.append)
        wait_for(lambda: len(flushes) == 2)
        assert flushes == [True, False]
        client.detach("good")
        client.detach("bad")
        client.attach("good")
        client.get_trace_stats()
        client.start_tracing()
        client.change_trace_config(TraceConfig(duration_ms=5))
        client.free_buffers()
        client.disable_tracing()
        wait_for(lambda: ("on_tracing_disabled", "stopped by the test") in consumer.events)
        wait_for(lambda: "on_trace_stats" in consumer.names())
        assert ("on_detach", True) in consumer.events
        assert ("on_detach", False) in consumer.events
        assert ("on_attach", (True, endpoint.config.SerializeToString())) in consumer.events
        assert ("on_trace_stats", (True, 7)) in consumer.events
        assert ("on_tracing_disabled", "stopped by the test") in consumer.events
        wait_for(lambda: "disable_tracing" in endpoint.names())
        assert [n for n in endpoint.names() if n in {"start_tracing", "free_buffers"}] == [
            "start_tracing",
            "free_buffers",
        ]
    finally:
        client.disconnect()
    wait_for(lambda: "disconnect" in endpoint.names())
    assert consumer.disconnected.is_set()


def test_query_service_state_is_split_and_merged(
    host: HostThread, sockets: tuple[str, str]
) -> None:
    consumer = RecordingConsumer()
    client = ConsumerIPCClient(sockets[1], consumer)
    client.connect()
    try:
        state = TracingServiceState(num_sessions=2, tracing_service_version="v1")
        for number in range(600):
            source = state.data_sources.add(producer_id=number)
            source.ds_descriptor.name = f"source.{number}." + "x" * 500
        assert state.ByteSize() > IPC_BUFFER_SIZE
        pieces = split_service_state(state)
        assert len(pieces) > 1
        assert all(len(piece) < IPC_BUFFER_SIZE - 128 for piece in pieces)
        assert TracingServiceState.FromString(b"".join(pieces)) == state
        client.wait_connected(10)
        client.get_trace_stats()
        wait_for(lambda: host.service.consumers)
        host.service.consumers[0].state = state
        results: list[tuple[bool, TracingServiceState]] = []
        client.query_service_state(False, lambda ok, merged: results.append((ok, merged)))
        wait_for(lambda: results)
        assert results[0] == (True, state)
        caps: list[TracingServiceCapabilities] = []
        client.query_capabilities(caps.append)
        wait_for(lambda: caps)
        assert caps[0].has_query_capabilities
    finally:
        client.disconnect()


def test_observe_events_stream(host: HostThread, sockets: tuple[str, str]) -> None:
    consumer = RecordingConsumer()
    client = ConsumerIPCClient(sockets[1], consumer)
    client.connect()
    try:
        mask = (
            ObservableEvents.TYPE_DATA_SOURCES_INSTANCES
            | ObservableEvents.TYPE_ALL_DATA_SOURCES_STARTED
        )
        client.observe_events(mask)
        wait_for(lambda: host.service.consumers and host.service.consumers[0].calls)
        endpoint = host.service.consumers[0]
        assert endpoint.calls == [("observe_events", mask)]
        events = ObservableEvents(all_data_sources_started=True)
        host.call(lambda: endpoint.consumer.on_observable_events(events))
        host.call(lambda: endpoint.consumer.on_observable_events(events))
        wait_for(lambda: len(consumer.events) == 2)
        assert consumer.events == [("on_observable_events", events.SerializeToString())] * 2
    finally:
        client.disconnect()


def test_save_for_bugreport_and_clone_answer_unsupported(
    host: HostThread, sockets: tuple[str, str]
) -> None:
    client = Client(sockets[1])
    try:
        port = client.bind("ConsumerPort").result(10)
        reply = client.invoke(
            port, "SaveTraceForBugreport", consumer_port_pb2.SaveTraceForBugreportRequest()
        ).result(10)
        answer = reply.unwrap(consumer_port_pb2.SaveTraceForBugreportResponse)
        assert not answer.success
        assert "not supported" in answer.msg
        reply = client.invoke(
            port, "CloneSession", consumer_port_pb2.CloneSessionRequest(session_id=1)
        ).result(10)
        assert not reply.unwrap(consumer_port_pb2.CloneSessionResponse).success
    finally:
        client.close()


def test_consumer_socket_gone_mid_call(sockets: tuple[str, str]) -> None:
    host = HostThread(FakeService(), *sockets)
    consumer = RecordingConsumer()
    client = ConsumerIPCClient(sockets[1], consumer)
    client.connect()
    try:
        client.enable_tracing(TraceConfig())
        wait_for(lambda: host.service.consumers)
    finally:
        host.close()
    assert consumer.disabled.wait(10)
    assert consumer.disconnected.wait(10)
    assert consumer.events[-1][0] == "on_tracing_disabled"
    client.close()


def test_service_dropping_a_producer_closes_its_socket(
    host: HostThread, sockets: tuple[str, str]
) -> None:
    client, producer = _connect_producer(host, sockets[0])
    try:
        wait_for(lambda: host.service.producers)
        host.call(host.service.producers[0].producer.on_disconnect)
        assert producer.disconnected.wait(10)
        assert not client.connected
    finally:
        client.close()


def test_nothing_happens_before_connect(host: HostThread, sockets: tuple[str, str]) -> None:
    producer = RecordingProducer()
    client = ProducerIPCClient(sockets[0], producer, "lazy")
    try:
        client.register_data_source(DataSourceDescriptor(name="early"))
        assert not client.wait_connected(0.3)
        assert producer.events == []
        assert host.service.producers == []
        client.connect()
        assert client.wait_connected(10)
        wait_for(lambda: host.service.producers and host.service.producers[0].calls)
        assert host.service.producers[0].calls == [("register_data_source", "early")]
        assert producer.names() == ["on_connect"]
    finally:
        client.disconnect()


def test_a_command_too_big_for_a_frame_drops_only_that_producer(
    host: HostThread, sockets: tuple[str, str]
) -> None:
    client, producer = _connect_producer(host, sockets[0])
    other, other_producer = _connect_producer(host, sockets[0])
    try:
        wait_for(lambda: len(host.service.producers) == 2)
        huge = DataSourceConfig(name="huge", legacy_config="x" * 200_000)
        host.call(lambda: host.service.producers[0].producer.start_data_source(1, huge))
        assert producer.disconnected.wait(10)
        small = DataSourceConfig(name="small")
        host.call(lambda: host.service.producers[1].producer.start_data_source(2, small))
        wait_for(lambda: "start_data_source" in other_producer.names())
        assert not other_producer.disconnected.is_set()
    finally:
        client.disconnect()
        other.disconnect()


def test_an_answer_too_big_for_a_frame_fails_the_call(
    host: HostThread, sockets: tuple[str, str]
) -> None:
    consumer = RecordingConsumer()
    client = ConsumerIPCClient(sockets[1], consumer)
    client.connect()
    try:
        client.enable_tracing(TraceConfig())
        wait_for(lambda: host.service.consumers and host.service.consumers[0].calls)
        host.service.consumers[0].config = TraceConfig(unique_session_name="x" * 200_000)
        client.attach("good")
        wait_for(lambda: "on_attach" in consumer.names())
        assert consumer.events[-1] == ("on_attach", (False, TraceConfig().SerializeToString()))
        client.get_trace_stats()
        wait_for(lambda: "on_trace_stats" in consumer.names())
    finally:
        client.disconnect()


def test_read_buffers_parts_are_packed_into_full_frames(
    host: HostThread, sockets: tuple[str, str]
) -> None:
    client = Client(sockets[1])
    try:
        port = client.bind("ConsumerPort").result(10)
        client.invoke(port, "GetTraceStats", consumer_port_pb2.GetTraceStatsRequest()).result(10)
        endpoint = host.service.consumers[0]
        endpoint.packets = [[f"{n:06d}".encode() * 160, b"\x18\x01"] for n in range(2000)]
        endpoint.parts = 400
        replies: list[Reply] = []
        client.invoke(
            port, "ReadBuffers", consumer_port_pb2.ReadBuffersRequest(), on_reply=replies.append
        ).result(10)
        messages = [r.unwrap(consumer_port_pb2.ReadBuffersResponse) for r in replies]
        assert [r.has_more for r in replies] == [True] * (len(replies) - 1) + [False]
        assert all(m.ByteSize() <= IPC_BUFFER_SIZE - 64 for m in messages)
        total = sum(m.ByteSize() for m in messages)
        assert len(replies) <= total // (IPC_BUFFER_SIZE - 64 - 1100) + 1
        data = [piece.data for m in messages for piece in m.slices]
        assert data == [piece for packet in endpoint.packets for piece in packet]
        ends = [piece.last_slice_for_packet for m in messages for piece in m.slices]
        assert ends == [False, True] * 2000
    finally:
        client.close()


def test_read_buffers_with_nothing_to_read(host: HostThread, sockets: tuple[str, str]) -> None:
    consumer = RecordingConsumer()
    client = ConsumerIPCClient(sockets[1], consumer)
    client.connect()
    try:
        client.read_buffers()
        assert consumer.read_done.wait(10)
        assert consumer.packets == []
    finally:
        client.disconnect()


class _RecordingCommands:
    """A GetAsyncCommand call that records each write of streamed replies."""

    done = False

    def __init__(self) -> None:
        self.writes: list[tuple[list[str], int | None]] = []

    def stream_serialized(self, replies: list[bytes], *, fd: int | None = None) -> None:
        if replies:
            kinds: list[str] = []
            for reply in replies:
                command = producer_port_pb2.GetAsyncCommandResponse.FromString(reply)
                kinds.append(command.WhichOneof("cmd") or "")
            self.writes.append((kinds, fd))


class _SmbEndpoint:
    def __init__(self, shm: SharedMemory) -> None:
        self.shm = shm

    def shared_memory(self) -> SharedMemory:
        return self.shm

    def shared_buffer_page_size_kb(self) -> int:
        return 4


def test_the_commands_of_one_turn_leave_in_one_write_after_the_smb_fd() -> None:
    # An SDK enables its categories on SetupDataSource and writes only once started: read
    # apart, the two leave a window where its events are dropped.
    turn: list[Callable[[], None]] = []
    producer = RemoteProducer(ClientInfo(client_id=1, uid=0, pid=1), turn.append)
    commands = _RecordingCommands()
    shm = SharedMemory.create(16 * 1024)
    try:
        producer.endpoint = cast(Any, _SmbEndpoint(shm))
        producer.bind_commands(cast(Any, commands))
        config = DataSourceConfig(name="late")
        producer.on_tracing_setup()
        producer.setup_data_source(1, config)
        producer.start_data_source(1, config)
        assert commands.writes == []  # nothing leaves before the loop ran its ready tasks
        assert len(turn) == 1
        turn.pop()()
        assert commands.writes == [
            (["setup_tracing"], shm.fd),
            (["setup_data_source", "start_data_source"], None),
        ]
        producer.stop_data_source(1)
        producer.flush(7, [1], 0)
        turn.pop()()
        assert commands.writes[2:] == [(["stop_data_source", "flush"], None)]
    finally:
        shm.close()
