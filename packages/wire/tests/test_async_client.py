"""AsyncClient used from inside an asyncio program, against a host in another process."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from perfetto_protos.ipc import consumer_port_pb2 as cp
from perfetto_protos.ipc import producer_port_pb2 as pp
from perfetto_testing import TIMEOUT
from perfetto_wire import (
    AsyncClient,
    ConnectionClosedError,
    Reply,
    RequestRejectedError,
    ServiceUnavailableError,
)
from wire_peer import READ_BUFFERS_REPLIES
from wire_testlib import HostProcess, Processes


@pytest.fixture
def host(processes: Processes, sock_dir: Path) -> HostProcess:
    return processes.start_host(str(sock_dir / "host.sock"))


def test_calls_streams_and_rejections(host: HostProcess) -> None:
    streamed: list[Reply] = []
    disconnected = asyncio.Event()

    async def session() -> None:
        client = AsyncClient(host.address, on_disconnect=disconnected.set)
        producer = await client.bind_service("ProducerPort")
        consumer = await client.bind_service("ConsumerPort")
        assert client.connected
        reply = await client.call(producer, "Sync", pp.SyncRequest())
        assert reply.unwrap(pp.SyncResponse) == pp.SyncResponse()
        final = await client.call(
            consumer, "ReadBuffers", cp.ReadBuffersRequest(), on_reply=streamed.append
        )
        assert final is streamed[-1]
        request = pp.ActivateTriggersRequest(trigger_names=["reject"])
        with pytest.raises(RequestRejectedError):
            await client.call(producer, "ActivateTriggers", request)
        pending = asyncio.ensure_future(
            client.call(consumer, "EnableTracing", cp.EnableTracingRequest())
        )
        await asyncio.sleep(0.05)
        host.process.terminate()
        with pytest.raises(ConnectionClosedError):
            await asyncio.wait_for(pending, TIMEOUT)
        await asyncio.wait_for(disconnected.wait(), TIMEOUT)
        assert client.closed
        with pytest.raises(ConnectionClosedError):
            await client.bind_service("ProducerPort")

    asyncio.run(asyncio.wait_for(session(), TIMEOUT * 2))
    assert len(streamed) == READ_BUFFERS_REPLIES
    assert [reply.has_more for reply in streamed[-2:]] == [True, False]


def test_unknown_service_on_the_host(host: HostProcess) -> None:
    async def session() -> None:
        client = AsyncClient(host.address)
        with pytest.raises(ServiceUnavailableError):
            await client.bind_service("RelayPort")
        client.close()

    asyncio.run(asyncio.wait_for(session(), TIMEOUT))


def test_retry_with_injected_backoff(processes: Processes, sock_dir: Path) -> None:
    address = str(sock_dir / "late.sock")
    delays: list[int] = []
    events: list[str] = []

    def backoff(attempt: int) -> float:
        delays.append(attempt)
        return 0.02

    async def session() -> None:
        client = AsyncClient(
            address,
            retry=True,
            backoff=backoff,
            on_connect=lambda: events.append("connected"),
            on_connect_failed=lambda: events.append(f"failed {client.connect_attempts}"),
        )
        bound = asyncio.ensure_future(client.bind_service("ProducerPort"))
        await asyncio.sleep(0.2)
        assert not bound.done()
        await asyncio.to_thread(processes.start_host, address)
        proxy = await asyncio.wait_for(bound, TIMEOUT)
        assert (await client.call(proxy, "Sync", pp.SyncRequest())).success
        client.close()

    asyncio.run(asyncio.wait_for(session(), TIMEOUT * 2))
    assert delays[:3] == [1, 2, 3]
    assert events == [f"failed {attempt}" for attempt in delays] + ["connected"]


def test_without_retry_a_failed_attempt_is_reported_then_the_client_closes(
    sock_dir: Path,
) -> None:
    events: list[str] = []

    async def session() -> None:
        client = AsyncClient(
            str(sock_dir / "nobody.sock"),
            on_connect_failed=lambda: events.append("failed"),
            on_disconnect=lambda: events.append("closed"),
        )
        client.connect()
        assert client.closed

    asyncio.run(asyncio.wait_for(session(), TIMEOUT))
    assert events == ["failed", "closed"]
