"""Serves a tracing service on producer and consumer sockets (upstream's ServiceIPCHost)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Sequence
from typing import Protocol

from perfetto_wire import Host, HostServer, WireError

from perfetto_service._consumer_port import ConsumerConnector, ConsumerPort
from perfetto_service._errors import ServiceError
from perfetto_service._producer_port import ProducerConnector, ProducerPort

__all__ = ["PRODUCER_SOCKET_SEND_TIMEOUT", "ServiceIPCHost", "TracingServiceConnector"]

PRODUCER_SOCKET_SEND_TIMEOUT = 0.010
"""Seconds a reply to a producer may wait: a producer that does not read is dropped."""


class TracingServiceConnector(ProducerConnector, ConsumerConnector, Protocol):
    """What the IPC host needs of a tracing service: connecting producers and consumers."""


class ServiceIPCHost:
    """Exposes ProducerPort on producer sockets and ConsumerPort on a consumer socket.

    Everything runs on one asyncio loop (the running loop by default), the loop that owns
    the service. Producer connections get a 10 ms send timeout, consumers the default.
    """

    def __init__(
        self, service: TracingServiceConnector, *, loop: asyncio.AbstractEventLoop | None = None
    ) -> None:
        self._loop = loop if loop is not None else asyncio.get_running_loop()
        self.producer_port = ProducerPort(service)
        self.consumer_port = ConsumerPort(service)
        producer_host = Host(on_disconnect=self.producer_port.on_client_disconnected)
        self.producer_port.expose_on(producer_host)
        consumer_host = Host(on_disconnect=self.consumer_port.on_client_disconnected)
        self.consumer_port.expose_on(consumer_host)
        self._producer_server = HostServer(
            producer_host, loop=self._loop, send_timeout=PRODUCER_SOCKET_SEND_TIMEOUT
        )
        self._consumer_server = HostServer(consumer_host, loop=self._loop)

    def start(self, producer_sockets: Sequence[str], consumer_socket: str) -> None:
        """Listens on every producer socket and on the consumer socket.

        Raises `ServiceError` naming the socket that could not be bound.
        """
        if not producer_sockets:
            raise ServiceError("at least one producer socket is needed")
        try:
            for name in producer_sockets:
                self._producer_server.listen(name)
            self._consumer_server.listen(consumer_socket)
        except WireError as exc:
            self.close()
            raise ServiceError(str(exc)) from exc

    def adopt(
        self, producer_sockets: Sequence[socket.socket], consumer_socket: socket.socket
    ) -> None:
        """Serves on sockets that are already listening (e.g. created by init)."""
        for sock in producer_sockets:
            self._producer_server.adopt_listening_socket(sock)
        self._consumer_server.adopt_listening_socket(consumer_socket)

    @property
    def producer_addresses(self) -> list[str]:
        """The producer sockets being listened on."""
        return self._producer_server.addresses

    @property
    def consumer_addresses(self) -> list[str]:
        """The consumer socket being listened on (empty before `start`)."""
        return self._consumer_server.addresses

    def close(self) -> None:
        """Stops listening and drops every connection (producers and consumers disconnect)."""
        self._producer_server.close()
        self._consumer_server.close()
