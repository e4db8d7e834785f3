"""A test peer for perfetto_wire: an IPC host or client, run in a separate process by the tests.

    python wire_peer.py host ADDRESS [--producer-methods N] [--send-timeout S]
    python wire_peer.py whoami ADDRESS
    python wire_peer.py send-memfd ADDRESS HEX_CONTENT
    python wire_peer.py stream-then-die ADDRESS

The host prints `READY <address>` once listening and serves until SIGTERM. The test service
is ProducerPort and ConsumerPort with handlers that report what the host saw.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import mmap
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

from google.protobuf.message import Message
from perfetto_protos.ipc import consumer_port_pb2 as cp
from perfetto_protos.ipc import producer_port_pb2 as pp
from perfetto_wire import (
    Client,
    ClientInfo,
    Deferred,
    Host,
    HostServer,
    ServiceDescriptor,
)

SHMEM_PATTERN = b"perfetto_shmem for client "
READ_BUFFERS_REPLIES = 40
SLICE_SIZE = 64 * 1024
STREAM_PERIOD = 0.02
COMMIT_DELAY = 0.02


def make_memfd(content: bytes, name: str = "perfetto_shmem") -> int:
    """A memfd of one page (or more) that starts with `content`."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    size = max(4096, -(-len(content) // 4096) * 4096)
    os.ftruncate(fd, size)
    with mmap.mmap(fd, size) as mapping:
        mapping[: len(content)] = content
    return fd


def read_mapped(fd: int) -> bytes:
    """Maps `fd` and returns its bytes up to the first NUL."""
    size = os.fstat(fd).st_size
    with mmap.mmap(fd, size, prot=mmap.PROT_READ) as mapping:
        data = bytes(mapping)
    return data.split(b"\0", 1)[0]


class ProducerPortService:
    """ProducerPort handlers that behave enough like traced for the wire tests."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.shmem: dict[int, bytes] = {}
        self.streams: dict[int, Deferred] = {}
        self.connected: list[ClientInfo] = []
        self.disconnected: list[ClientInfo] = []
        self.events: list[str] = []

    def on_connect(self, client: ClientInfo) -> None:
        self.connected.append(client)

    def on_disconnect(self, client: ClientInfo) -> None:
        self.disconnected.append(client)
        self.streams.pop(client.client_id, None)
        self.shmem.pop(client.client_id, None)

    def initialize_connection(
        self, request: pp.InitializeConnectionRequest, call: Deferred
    ) -> pp.InitializeConnectionResponse:
        fd = call.take_received_fd()
        if fd is not None:
            try:
                self.shmem[call.client.client_id] = read_mapped(fd)
            finally:
                os.close(fd)
        self.events.append(f"init:{request.producer_name}")
        return pp.InitializeConnectionResponse(using_shmem_provided_by_producer=fd is not None)

    def register_data_source(
        self, request: pp.RegisterDataSourceRequest, call: Deferred
    ) -> pp.RegisterDataSourceResponse:
        """Answers with what the host knows about the caller, as JSON in `error`."""
        client = call.client
        shmem = self.shmem.get(client.client_id)
        report = {
            "client_id": client.client_id,
            "uid": client.uid,
            "pid": client.pid,
            "name": request.data_source_descriptor.name,
            "shmem": shmem.hex() if shmem is not None else None,
        }
        return pp.RegisterDataSourceResponse(error=json.dumps(report))

    def get_async_command(self, request: pp.GetAsyncCommandRequest, call: Deferred) -> None:
        """SetupTracing with a memfd, three StartDataSource, then a Flush every period forever."""
        client_id = call.client.client_id
        setup = pp.GetAsyncCommandResponse()
        setup.setup_tracing.shared_buffer_page_size_kb = 4
        fd = make_memfd(SHMEM_PATTERN + str(client_id).encode())
        try:
            call.resolve(setup, has_more=True, fd=fd)
        finally:
            os.close(fd)
        for instance in (1, 2, 3):
            start = pp.GetAsyncCommandResponse()
            start.start_data_source.new_instance_id = instance
            call.resolve(start, has_more=True)
        self.streams[client_id] = call
        self.loop.call_later(STREAM_PERIOD, self._flush_forever, call, 1)

    def _flush_forever(self, call: Deferred, flush_id: int) -> None:
        if not call.connected:
            return
        flush = pp.GetAsyncCommandResponse()
        flush.flush.request_id = flush_id
        call.resolve(flush, has_more=True)
        self.loop.call_later(STREAM_PERIOD, self._flush_forever, call, flush_id + 1)

    def commit_data(self, request: Message, call: Deferred) -> None:
        """Replies later, from a timer."""
        self.loop.call_later(COMMIT_DELAY, self._commit_done, call)

    def _commit_done(self, call: Deferred) -> None:
        if call.connected:
            call.resolve(pp.CommitDataResponse())

    def sync(self, request: pp.SyncRequest, call: Deferred) -> pp.SyncResponse:
        return pp.SyncResponse()

    def activate_triggers(
        self, request: pp.ActivateTriggersRequest, call: Deferred
    ) -> Message | None:
        """Misbehaves on request: `raise`, `reject`, `wrong-type`, `twice`."""
        names = list(request.trigger_names)
        self.events.append("triggers:" + ",".join(names))
        if "raise" in names:
            raise RuntimeError("handler failure requested by the test")
        if "reject" in names:
            call.reject()
            return None
        if "wrong-type" in names:
            return pp.SyncResponse()
        if "twice" in names:
            call.resolve(pp.ActivateTriggersResponse())
            return pp.ActivateTriggersResponse()
        return pp.ActivateTriggersResponse()


class ConsumerPortService:
    """ConsumerPort handlers: a deferred EnableTracing and a heavy ReadBuffers stream."""

    def __init__(self) -> None:
        self.sessions: dict[int, Deferred] = {}

    def on_disconnect(self, client: ClientInfo) -> None:
        self.sessions.pop(client.client_id, None)

    def enable_tracing(self, request: cp.EnableTracingRequest, call: Deferred) -> None:
        """Answers only when the same client disables tracing, like traced."""
        self.sessions[call.client.client_id] = call

    def disable_tracing(
        self, request: cp.DisableTracingRequest, call: Deferred
    ) -> cp.DisableTracingResponse:
        session = self.sessions.pop(call.client.client_id, None)
        if session is not None:
            session.resolve(cp.EnableTracingResponse(disabled=True))
        return cp.DisableTracingResponse()

    def read_buffers(self, request: cp.ReadBuffersRequest, call: Deferred) -> None:
        """Streams READ_BUFFERS_REPLIES replies of one SLICE_SIZE slice each."""
        for index in range(READ_BUFFERS_REPLIES):
            reply = cp.ReadBuffersResponse()
            reply.slices.add(data=bytes([index % 256]) * SLICE_SIZE, last_slice_for_packet=True)
            call.resolve(reply, has_more=index + 1 < READ_BUFFERS_REPLIES)


class PeerServices:
    """Both test services, with connection callbacks fanned out to them."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.producer = ProducerPortService(loop)
        self.consumer = ConsumerPortService()

    def on_connect(self, client: ClientInfo) -> None:
        self.producer.on_connect(client)

    def on_disconnect(self, client: ClientInfo) -> None:
        self.producer.on_disconnect(client)
        self.consumer.on_disconnect(client)


def build_host(
    loop: asyncio.AbstractEventLoop, producer_methods: int | None = None
) -> tuple[Host, PeerServices]:
    """A Host exposing ProducerPort (id 1, optionally an older version with fewer methods) and
    ConsumerPort (id 2)."""
    services = PeerServices(loop)
    host = Host(on_connect=services.on_connect, on_disconnect=services.on_disconnect)
    producer_port = ServiceDescriptor.for_service("ProducerPort")
    if producer_methods is not None:
        producer_port = producer_port.truncated(producer_methods)
    host.expose_service(producer_port, services.producer)
    host.expose_service(ServiceDescriptor.for_service("ConsumerPort"), services.consumer)
    return host, services


def _serve(address: str, producer_methods: int | None, send_timeout: float) -> None:
    loop = asyncio.new_event_loop()
    host, _service = build_host(loop, producer_methods)
    server = HostServer(host, loop=loop, send_timeout=send_timeout)
    name = server.listen(address)
    loop.add_signal_handler(signal.SIGTERM, loop.stop)
    print(f"READY {name}", flush=True)
    try:
        loop.run_forever()
    finally:
        server.close()
        loop.close()


def _whoami(client: Client, proxy: Any) -> dict[str, Any]:
    request = pp.RegisterDataSourceRequest()
    request.data_source_descriptor.name = "whoami"
    reply = client.invoke(proxy, "RegisterDataSource", request).result(10)
    result: dict[str, Any] = json.loads(reply.unwrap(pp.RegisterDataSourceResponse).error)
    return result


def _run_client(address: str, action: Callable[[Client, Any], None]) -> None:
    with Client(address) as client:
        proxy = client.bind("ProducerPort").result(10)
        action(client, proxy)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    host = sub.add_parser("host")
    host.add_argument("address")
    host.add_argument("--producer-methods", type=int)
    host.add_argument("--send-timeout", type=float, default=10.0)
    for command in ("whoami", "stream-then-die"):
        sub.add_parser(command).add_argument("address")
    memfd = sub.add_parser("send-memfd")
    memfd.add_argument("address")
    memfd.add_argument("content")
    args = parser.parse_args(argv)

    if args.command == "host":
        _serve(args.address, args.producer_methods, args.send_timeout)
    elif args.command == "whoami":
        _run_client(args.address, lambda c, p: print(json.dumps(_whoami(c, p)), flush=True))
    elif args.command == "send-memfd":
        content = bytes.fromhex(args.content)

        def send(client: Client, proxy: Any) -> None:
            fd = make_memfd(content)
            request = pp.InitializeConnectionRequest(producer_provided_shmem=True)
            client.invoke(proxy, "InitializeConnection", request, fd=fd).result(10)
            os.close(fd)
            print(json.dumps(_whoami(client, proxy)), flush=True)

        _run_client(args.address, send)
    else:
        streaming = threading.Event()
        seen: list[int] = []

        def count(_reply: object) -> None:
            seen.append(1)
            if len(seen) >= 6:
                streaming.set()

        def stream(client: Client, proxy: Any) -> None:
            client.invoke(proxy, "GetAsyncCommand", pp.GetAsyncCommandRequest(), on_reply=count)
            streaming.wait(10)
            print("STREAMING", flush=True)
            os._exit(0)

        _run_client(args.address, stream)


if __name__ == "__main__":
    main(sys.argv[1:])
