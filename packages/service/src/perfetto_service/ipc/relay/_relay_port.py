"""The RelayPort service (upstream's RelayIPCService), served beside ProducerPort.

A relay calls InitRelay with its machine's SystemInfo and SyncClock with its clock readings;
the port reads the service's clocks as each SyncClock arrives and hands both to the
service's `RelayEndpoint` for the relay's connection (keyed by client id, tagged with the
machine id the connection's SetPeerIdentity gave).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from google.protobuf.message import Message
from perfetto_protos.ipc import relay_port_pb2 as pb
from perfetto_wire import ClientInfo, Deferred, Host, ServiceDescriptor

from perfetto_service.core._relay_clients import RelayEndpoint, SyncMode
from perfetto_service.core._service_packets import ClockReading, capture_clock_snapshot

__all__ = ["RelayConnector", "RelayPort"]


class RelayConnector(Protocol):
    """The part of the tracing service the relay port needs."""

    def connect_relay_client(self, machine_id: int, client_id: int) -> RelayEndpoint:
        """Admits a relay connection."""


class RelayPort:
    """The handlers of the RelayPort service, one `RelayEndpoint` per connection."""

    descriptor = ServiceDescriptor.for_service("RelayPort")

    def __init__(self, service: RelayConnector) -> None:
        self._service = service
        self._endpoints: dict[int, RelayEndpoint] = {}

    def expose_on(self, host: Host) -> None:
        """Exposes the service on `host` (call `on_client_disconnected` from the host's hook)."""
        handlers: dict[str, Callable[[Message, Deferred], Message | None]] = {
            "InitRelay": self._init_relay,  # type: ignore[dict-item]
            "SyncClock": self._sync_clock,  # type: ignore[dict-item]
        }
        host.expose_service(self.descriptor, handlers)

    def on_client_disconnected(self, client: ClientInfo) -> None:
        """Forgets a relay connection."""
        endpoint = self._endpoints.pop(client.client_id, None)
        if endpoint is not None:
            endpoint.disconnect()

    def _endpoint(self, client: ClientInfo) -> RelayEndpoint:
        endpoint = self._endpoints.get(client.client_id)
        if endpoint is None:
            endpoint = self._service.connect_relay_client(client.machine_id, client.client_id)
            self._endpoints[client.client_id] = endpoint
        return endpoint

    def _init_relay(self, request: pb.InitRelayRequest, deferred: Deferred) -> Message:
        endpoint = self._endpoint(deferred.client)
        endpoint.cache_system_info(request.system_info.SerializeToString())
        return pb.InitRelayResponse()

    def _sync_clock(self, request: pb.SyncClockRequest, deferred: Deferred) -> Message:
        host_clocks = capture_clock_snapshot()
        client_clocks = [ClockReading(c.clock_id, c.timestamp) for c in request.clocks]
        mode = SyncMode.PING if request.phase == pb.SyncClockRequest.PING else SyncMode.UPDATE
        self._endpoint(deferred.client).sync_clocks(mode, client_clocks, host_clocks)
        return pb.SyncClockResponse()
