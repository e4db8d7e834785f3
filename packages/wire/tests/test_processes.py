"""Real processes over real sockets: hosts and clients in different processes."""

from __future__ import annotations

import json
import logging
import mmap
import os
import select
import socket
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from perfetto_protos.common.commit_data_request_pb2 import CommitDataRequest
from perfetto_protos.ipc import consumer_port_pb2 as cp
from perfetto_protos.ipc import producer_port_pb2 as pp
from perfetto_protos.ipc.wire_protocol_pb2 import IPCFrame
from perfetto_testing import TIMEOUT, wait_for
from perfetto_wire import (
    Client,
    ConnectionClosedError,
    FrameDecoder,
    FrameTooLargeError,
    MethodNotAvailableError,
    Reply,
    RequestRejectedError,
    ServiceProxy,
    ServiceUnavailableError,
    encode_frame,
)
from perfetto_wire._async_client import reconnect_delay
from perfetto_wire._framing import MAX_PAYLOAD_SIZE
from wire_peer import READ_BUFFERS_REPLIES, SHMEM_PATTERN, SLICE_SIZE, read_mapped
from wire_testlib import HostProcess, Processes, ThreadHost


@pytest.fixture
def host(processes: Processes, sock_dir: Path) -> HostProcess:
    """The test host in a child process."""
    return processes.start_host(str(sock_dir / "host.sock"))


def whoami(client: Client, proxy: ServiceProxy, name: str = "whoami") -> dict[str, Any]:
    request = pp.RegisterDataSourceRequest()
    request.data_source_descriptor.name = name
    reply = client.invoke(proxy, "RegisterDataSource", request).result(TIMEOUT)
    result: dict[str, Any] = json.loads(reply.unwrap(pp.RegisterDataSourceResponse).error)
    return result


def test_bind_invoke_and_deferred_reply(host: HostProcess) -> None:
    with Client(host.address) as client:
        producer = client.bind("ProducerPort").result(TIMEOUT)
        consumer = client.bind("ConsumerPort").result(TIMEOUT)
        assert (producer.service_id, consumer.service_id) == (1, 2)
        info = whoami(client, producer)
        assert (info["uid"], info["pid"]) == (os.getuid(), os.getpid())
        reply = client.invoke(producer, "Sync", pp.SyncRequest()).result(TIMEOUT)
        assert reply.unwrap(pp.SyncResponse) == pp.SyncResponse()
        started = time.monotonic()
        commit = client.invoke(producer, "CommitData", CommitDataRequest())
        assert commit.result(TIMEOUT).success
        assert time.monotonic() - started >= 0.015


def test_enable_tracing_is_answered_when_tracing_is_disabled(host: HostProcess) -> None:
    with Client(host.address) as client:
        consumer = client.bind("ConsumerPort").result(TIMEOUT)
        enabled = client.invoke(consumer, "EnableTracing", cp.EnableTracingRequest())
        time.sleep(0.05)
        assert not enabled.done()
        client.invoke(consumer, "DisableTracing", cp.DisableTracingRequest()).result(TIMEOUT)
        assert enabled.result(TIMEOUT).unwrap(cp.EnableTracingResponse).disabled


def test_streamed_replies_and_an_fd_from_the_host(host: HostProcess) -> None:
    replies: list[Reply] = []
    enough = threading.Event()

    def on_reply(reply: Reply) -> None:
        replies.append(reply)
        if len(replies) >= 6:
            enough.set()

    with Client(host.address) as client:
        producer = client.bind("ProducerPort").result(TIMEOUT)
        info = whoami(client, producer)
        stream = client.invoke(
            producer, "GetAsyncCommand", pp.GetAsyncCommandRequest(), on_reply=on_reply
        )
        assert enough.wait(TIMEOUT)
        assert not stream.done()
        commands = [reply.unwrap(pp.GetAsyncCommandResponse) for reply in replies]
        assert [command.WhichOneof("cmd") for command in commands[:6]] == [
            "setup_tracing",
            "start_data_source",
            "start_data_source",
            "start_data_source",
            "flush",
            "flush",
        ]
        assert all(reply.has_more for reply in replies)
        fd = replies[0].fd
        assert fd is not None
        assert all(reply.fd is None for reply in replies[1:])
        try:
            assert read_mapped(fd) == SHMEM_PATTERN + str(info["client_id"]).encode()
        finally:
            os.close(fd)
    with pytest.raises(ConnectionClosedError, match="connection lost"):
        stream.result(TIMEOUT)


def test_stream_of_large_replies(host: HostProcess) -> None:
    sizes: list[int] = []
    with Client(host.address) as client:
        consumer = client.bind("ConsumerPort").result(TIMEOUT)
        final = client.invoke(
            consumer,
            "ReadBuffers",
            cp.ReadBuffersRequest(),
            on_reply=lambda reply: sizes.append(
                len(reply.unwrap(cp.ReadBuffersResponse).slices[0].data)
            ),
        ).result(TIMEOUT)
    assert sizes == [SLICE_SIZE] * READ_BUFFERS_REPLIES
    last = final.unwrap(cp.ReadBuffersResponse).slices[0].data
    assert last == bytes([READ_BUFFERS_REPLIES - 1]) * SLICE_SIZE


def test_memfd_from_another_process_maps_to_the_same_bytes(
    thread_host: ThreadHost, processes: Processes
) -> None:
    content = b"shared memory from the producer \x01\x02\x03"
    child = processes.spawn("send-memfd", thread_host.address, content.hex())
    out, err = child.communicate(timeout=TIMEOUT)
    assert child.returncode == 0, err
    report = json.loads(out)
    assert bytes.fromhex(report["shmem"]) == content
    assert report["pid"] == child.pid


def test_memfd_to_another_process_maps_to_the_same_bytes(host: HostProcess) -> None:
    """The host process creates the memfd; this process maps it (SetupTracing)."""
    got: Future[Reply] = Future()
    with Client(host.address) as client:
        producer = client.bind("ProducerPort").result(TIMEOUT)
        client_id = whoami(client, producer)["client_id"]
        client.invoke(
            producer,
            "GetAsyncCommand",
            pp.GetAsyncCommandRequest(),
            on_reply=lambda reply: None if got.done() else got.set_result(reply),
        )
        fd = got.result(TIMEOUT).fd
        assert fd is not None
        try:
            with mmap.mmap(fd, os.fstat(fd).st_size) as mapping:
                expected = SHMEM_PATTERN + str(client_id).encode()
                assert mapping[: len(expected)] == expected
        finally:
            os.close(fd)


def test_peer_credentials_of_a_child_process(thread_host: ThreadHost, processes: Processes) -> None:
    child = processes.spawn("whoami", thread_host.address)
    out, err = child.communicate(timeout=TIMEOUT)
    assert child.returncode == 0, err
    report = json.loads(out)
    assert (report["uid"], report["pid"]) == (os.getuid(), child.pid)
    connected = thread_host.call(lambda: list(thread_host.services.producer.connected))
    assert [(info.uid, info.pid) for info in connected] == [(os.getuid(), child.pid)]


def test_fifty_concurrent_clients(host: HostProcess) -> None:
    clients = [Client(host.address) for _ in range(50)]
    try:
        proxies = [client.bind("ProducerPort") for client in clients]
        bound = [proxy.result(TIMEOUT) for proxy in proxies]
        pending = [
            (index, client.invoke(proxy, "RegisterDataSource", named(f"client-{index}")))
            for _ in range(5)
            for index, (client, proxy) in enumerate(zip(clients, bound, strict=True))
        ]
        syncs = [
            client.invoke(proxy, "Sync", pp.SyncRequest())
            for client, proxy in zip(clients, bound, strict=True)
        ]
        reports = [
            (index, json.loads(future.result(TIMEOUT).unwrap(pp.RegisterDataSourceResponse).error))
            for index, future in pending
        ]
        assert all(sync.result(TIMEOUT).success for sync in syncs)
    finally:
        for client in clients:
            client.close()
    assert all(report["name"] == f"client-{index}" for index, report in reports)
    by_client = {index: report["client_id"] for index, report in reports}
    assert len(set(by_client.values())) == 50


def named(name: str) -> pp.RegisterDataSourceRequest:
    request = pp.RegisterDataSourceRequest()
    request.data_source_descriptor.name = name
    return request


def test_client_disconnecting_mid_stream(thread_host: ThreadHost, processes: Processes) -> None:
    child = processes.spawn("stream-then-die", thread_host.address)
    out, _ = child.communicate(timeout=TIMEOUT)
    assert out.strip() == "STREAMING"
    producer = thread_host.services.producer
    wait_for(lambda: bool(thread_host.call(lambda: producer.disconnected)))
    (gone,) = thread_host.call(lambda: list(producer.disconnected))
    assert gone.pid == child.pid
    assert thread_host.call(lambda: dict(producer.streams)) == {}
    with Client(thread_host.address) as client:
        proxy = client.bind("ProducerPort").result(TIMEOUT)
        assert whoami(client, proxy)["pid"] == os.getpid()
    wait_for(lambda: thread_host.call(lambda: thread_host.server.connection_count) == 0)


def raw_connection(address: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(TIMEOUT)
    sock.connect(address)
    return sock


def read_frames(sock: socket.socket, count: int) -> list[IPCFrame]:
    decoder = FrameDecoder()
    frames: list[IPCFrame] = []
    while len(frames) < count:
        data = sock.recv(65536)
        assert data, "connection closed early"
        frames += decoder.feed(data)
    return frames


def test_peer_sending_one_byte_at_a_time(host: HostProcess) -> None:
    bind = IPCFrame(request_id=1)
    bind.msg_bind_service.service_name = "ProducerPort"
    call = IPCFrame(request_id=2)
    call.msg_invoke_method.service_id = 1
    call.msg_invoke_method.method_id = 11
    stream = encode_frame(bind) + encode_frame(call)
    with raw_connection(host.address) as sock:
        for index in range(len(stream)):
            sock.send(stream[index : index + 1])
            time.sleep(0.001)
        bind_reply, sync_reply = read_frames(sock, 2)
    assert bind_reply.msg_bind_service_reply.success
    assert sync_reply.request_id == 2
    assert sync_reply.msg_invoke_method_reply.success


def test_oversize_frame_closes_only_that_connection(host: HostProcess) -> None:
    with Client(host.address) as client:
        proxy = client.bind("ProducerPort").result(TIMEOUT)
        with raw_connection(host.address) as sock:
            sock.sendall((MAX_PAYLOAD_SIZE + 1).to_bytes(4, "little") + b"\0" * 16)
            assert sock.recv(16) == b""
        assert client.invoke(proxy, "Sync", pp.SyncRequest()).result(TIMEOUT).success
    assert host.alive()


def test_method_missing_from_an_older_host(processes: Processes, sock_dir: Path) -> None:
    old = processes.start_host(str(sock_dir / "old.sock"), "--producer-methods", "10")
    with Client(old.address) as client:
        proxy = client.bind("ProducerPort").result(TIMEOUT)
        assert "Sync" not in proxy.remote_methods
        with pytest.raises(MethodNotAvailableError):
            client.invoke(proxy, "Sync", pp.SyncRequest()).result(TIMEOUT)
        triggers = client.invoke(proxy, "ActivateTriggers", pp.ActivateTriggersRequest())
        assert triggers.result(TIMEOUT).success


def test_handler_errors_reach_the_caller_as_rejections(host: HostProcess) -> None:
    with Client(host.address) as client:
        proxy = client.bind("ProducerPort").result(TIMEOUT)
        for action in ("raise", "reject", "wrong-type", "twice"):
            request = pp.ActivateTriggersRequest(trigger_names=[action])
            future = client.invoke(proxy, "ActivateTriggers", request)
            if action == "twice":
                assert future.result(TIMEOUT).success
            else:
                with pytest.raises(RequestRejectedError):
                    future.result(TIMEOUT)
        assert client.invoke(proxy, "Sync", pp.SyncRequest()).result(TIMEOUT).success


def test_client_reconnects_when_the_host_appears_late(processes: Processes, sock_dir: Path) -> None:
    address = str(sock_dir / "late.sock")
    with Client(address, retry=True, backoff=lambda attempt: 0.05) as client:
        bound = client.bind("ProducerPort")
        deadline = time.monotonic() + TIMEOUT
        while client.async_client.connect_attempts < 3:  # three failed attempts, then the host
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert not bound.done()
        processes.start_host(address)
        proxy = bound.result(TIMEOUT)
        assert client.invoke(proxy, "Sync", pp.SyncRequest()).result(TIMEOUT).success


def test_client_without_retry_fails_fast(sock_dir: Path) -> None:
    with (
        Client(str(sock_dir / "nobody.sock")) as client,
        pytest.raises(ServiceUnavailableError, match="cannot bind"),
    ):
        client.bind("ProducerPort").result(TIMEOUT)


def test_upstream_backoff_schedule() -> None:
    assert [reconnect_delay(attempt) for attempt in range(1, 14)] == [
        *map(float, range(1, 11)),
        30.0,
        30.0,
        30.0,
    ]


def _slow_reader(address: str) -> socket.socket:
    """A connection that asks for ReadBuffers' many replies and reads none of them."""
    bind = IPCFrame(request_id=1)
    bind.msg_bind_service.service_name = "ConsumerPort"
    read = IPCFrame(request_id=2)
    read.msg_invoke_method.service_id = 2
    read.msg_invoke_method.method_id = 3
    slow = raw_connection(address)
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    slow.sendall(encode_frame(bind) + encode_frame(read))
    return slow


def test_slow_reader_does_not_stall_others(processes: Processes, sock_dir: Path) -> None:
    # The send timeout outlasts every wait below: had the host blocked on the slow reader,
    # the calls would time out.
    timeout = str(3 * TIMEOUT)
    host = processes.start_host(str(sock_dir / "slow.sock"), "--send-timeout", timeout)
    with Client(host.address) as client, _slow_reader(host.address) as slow:
        proxy = client.bind("ProducerPort").result(TIMEOUT)
        for _ in range(20):
            assert client.invoke(proxy, "Sync", pp.SyncRequest()).result(TIMEOUT).success
        assert slow.recv(1 << 16)  # still connected: its replies wait for it


def test_slow_reader_is_cut_off(processes: Processes, sock_dir: Path) -> None:
    host = processes.start_host(str(sock_dir / "slow.sock"), "--send-timeout", "0.3")
    with Client(host.address) as client, _slow_reader(host.address) as slow:
        proxy = client.bind("ProducerPort").result(TIMEOUT)
        # Cut off: the host closed its end, which a UNIX socket reports (POLLRDHUP) before the
        # replies queued on it are read.
        hangup = select.poll()
        hangup.register(slow, select.POLLRDHUP)
        wait_for(lambda: hangup.poll(0), what="the host to cut the slow reader off")
        received = 0
        while chunk := slow.recv(1 << 20):
            received += len(chunk)
        assert 0 < received < READ_BUFFERS_REPLIES * SLICE_SIZE
        assert client.invoke(proxy, "Sync", pp.SyncRequest()).result(TIMEOUT).success


hostile_frames = st.lists(
    st.one_of(
        st.binary(max_size=48),
        st.binary(max_size=48).map(lambda b: len(b).to_bytes(4, "little") + b),
        st.sampled_from(
            [
                bytes.fromhex("12000000 1001 1a0e 0a0c 50726f6475636572506f7274"),
                bytes.fromhex("0c000000 1002 2a08 0801 100b 1a00 2000"),
                bytes.fromhex("0c000000 1003 2a08 0803 1063 1a00 2000"),
                bytes.fromhex("0a000000 1004 2a06 0801 1001 1a02 ffff"),
                bytes.fromhex("ffffffff"),
            ]
        ),
    ),
    min_size=1,
    max_size=8,
)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(frames=hostile_frames)
def test_hostile_peers_do_not_hurt_the_host(
    host: HostProcess, frames: list[bytes], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.CRITICAL)
    stream = b"".join(frames)
    try:
        FrameDecoder().feed(stream)
    except FrameTooLargeError:
        oversize = True
    else:
        oversize = False
    closed_by_host = False
    with raw_connection(host.address) as sock:
        sock.sendall(stream)
        sock.settimeout(TIMEOUT if oversize else 0.2)
        try:
            while sock.recv(65536):
                pass
            closed_by_host = True
        except TimeoutError:
            pass
    assert closed_by_host == oversize
    with Client(host.address) as client:
        proxy = client.bind("ProducerPort").result(TIMEOUT)
        assert client.invoke(proxy, "Sync", pp.SyncRequest()).result(TIMEOUT).success
    assert host.alive()
