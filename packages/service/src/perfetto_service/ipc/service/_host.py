"""Serves a tracing service on producer and consumer sockets (upstream's ServiceIPCHost)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Collection, Sequence
from typing import Protocol

from perfetto_wire import (
    DEFAULT_SEND_TIMEOUT,
    ClientInfo,
    Host,
    HostServer,
    WireError,
    parse_address,
)

from perfetto_service._errors import ServiceError
from perfetto_service.ipc.relay._relay_port import RelayConnector, RelayPort
from perfetto_service.ipc.service._consumer_port import ConsumerConnector, ConsumerPort
from perfetto_service.ipc.service._producer_port import ProducerConnector, ProducerPort

__all__ = ["PRODUCER_SOCKET_SEND_TIMEOUT", "ServiceIPCHost", "TracingServiceConnector"]

PRODUCER_SOCKET_SEND_TIMEOUT = 0.010
"""Seconds a reply to a producer may wait: a producer that does not read is dropped."""


class TracingServiceConnector(ProducerConnector, ConsumerConnector, RelayConnector, Protocol):
    """What the IPC host needs of a tracing service: connecting producers, consumers, relays."""


class ServiceIPCHost:
    """Exposes ProducerPort on producer sockets and ConsumerPort on a consumer socket.

    Everything runs on one asyncio loop (the running loop by default), the loop that owns
    the service. Each producer socket has its own IPC host and port, so that producers on
    sockets that cannot pass file descriptors (TCP, vsock) are told to use shared memory
    emulation. RelayPort (and SetPeerIdentity) is served only on the producer sockets named
    as relay sockets (upstream's `--enable-relay-endpoint[-on]`); elsewhere BindService of
    RelayPort fails. Producer connections get a 10 ms send timeout, consumers
    `consumer_send_timeout` seconds: a peer that takes nothing of a reply for that long is
    disconnected.
    """

    def __init__(
        self,
        service: TracingServiceConnector,
        *,
        loop: asyncio.AbstractEventLoop | None = None,
        consumer_send_timeout: float = DEFAULT_SEND_TIMEOUT,
    ) -> None:
        self._loop = loop if loop is not None else asyncio.get_running_loop()
        self._service = service
        self.producer_ports: list[ProducerPort] = []
        self._producer_servers: list[HostServer] = []
        self.consumer_port = ConsumerPort(service)
        consumer_host = Host(on_disconnect=self.consumer_port.on_client_disconnected)
        self.consumer_port.expose_on(consumer_host)
        self._consumer_server = HostServer(
            consumer_host, loop=self._loop, send_timeout=consumer_send_timeout
        )

    def _producer_server(self, *, shmem_emulation: bool, relay: bool) -> HostServer:
        port = ProducerPort(self._service, self._loop.call_soon, shmem_emulation=shmem_emulation)
        relay_port = RelayPort(self._service) if relay else None

        def on_disconnect(client: ClientInfo) -> None:
            port.on_client_disconnected(client)
            if relay_port is not None:
                relay_port.on_client_disconnected(client)

        host = Host(on_disconnect=on_disconnect, accept_peer_identity=relay)
        port.expose_on(host)
        if relay_port is not None:
            relay_port.expose_on(host)
        server = HostServer(host, loop=self._loop, send_timeout=PRODUCER_SOCKET_SEND_TIMEOUT)
        self.producer_ports.append(port)
        self._producer_servers.append(server)
        return server

    def start(
        self,
        producer_sockets: Sequence[str],
        consumer_socket: str,
        *,
        relay_sockets: Collection[str] = (),
    ) -> None:
        """Listens on every producer socket and on the consumer socket.

        The producer sockets named in `relay_sockets` also serve RelayPort.
        Raises `ServiceError` naming the socket that could not be bound (caused by the
        `perfetto_wire.ListenError`); then nothing listens and the socket files this call
        created are gone.
        """
        if not producer_sockets:
            raise ServiceError("at least one producer socket is needed")
        created: list[str] = []
        try:
            for name in producer_sockets:
                address = parse_address(name)
                server = self._producer_server(
                    shmem_emulation=not address.is_unix, relay=name in relay_sockets
                )
                server.listen(name)
                created.append(address.filesystem_path or "")
            address = parse_address(consumer_socket)
            self._consumer_server.listen(consumer_socket)
            created.append(address.filesystem_path or "")
        except WireError as exc:
            self.close()
            for path in filter(None, created):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
            raise ServiceError(str(exc)) from exc

    def adopt(
        self, producer_sockets: Sequence[socket.socket], consumer_socket: socket.socket
    ) -> None:
        """Serves on sockets that are already listening (e.g. created by init); no RelayPort."""
        for sock in producer_sockets:
            unix = sock.family == socket.AF_UNIX
            server = self._producer_server(shmem_emulation=not unix, relay=False)
            server.adopt_listening_socket(sock)
        self._consumer_server.adopt_listening_socket(consumer_socket)

    @property
    def producer_addresses(self) -> list[str]:
        """The producer sockets being listened on."""
        return [name for server in self._producer_servers for name in server.addresses]

    @property
    def consumer_addresses(self) -> list[str]:
        """The consumer socket being listened on (empty before `start`)."""
        return self._consumer_server.addresses

    def close(self) -> None:
        """Stops listening and drops every connection (producers and consumers disconnect)."""
        for server in self._producer_servers:
            server.close()
        self._consumer_server.close()
