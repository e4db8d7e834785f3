"""The relays connected to the service (upstream's RelayEndpoint) and the packets they add.

A relay (`traced_relay` on another machine) reports its machine's SystemInfo and exchanges
clock readings with the service; sessions get, once each, a SystemInfo packet and a
RemoteClockSync packet per remote machine, tagged with that machine's id, so that a reader
can put every machine on the service's timeline.
"""

from __future__ import annotations

import enum
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from typing import NamedTuple

from perfetto_protos.tags.fields import (
    RemoteClockSync_synced_clocks_ID,
    RemoteClockSync_SyncedClocks_client_clocks_ID,
    RemoteClockSync_SyncedClocks_host_clocks_ID,
    TracePacket_machine_id_ID,
    TracePacket_remote_clock_sync_ID,
    TracePacket_system_info_ID,
    TracePacket_trusted_packet_sequence_id_ID,
    TracePacket_trusted_uid_ID,
)

from perfetto_service.core._field_encoding import bytes_field, nested_field, varint_field
from perfetto_service.core._service_packets import ClockReading, clock_snapshot_clocks
from perfetto_service.core._session import TracingSession
from perfetto_service.core._trusted_fields import SERVICE_PACKET_SEQUENCE_ID

__all__ = ["SYNCED_CLOCKS_KEPT", "ClockExchange", "RelayClients", "RelayEndpoint", "SyncMode"]

SYNCED_CLOCKS_KEPT = 5
"""Clock exchanges kept per relay (the most recent ones), as upstream's service keeps."""


class SyncMode(enum.IntEnum):
    """The phase of a SyncClock call: PING measures the round trip, UPDATE records."""

    PING = 1
    UPDATE = 2


class ClockExchange(NamedTuple):
    """One SyncClock call: the relay's clocks when it sent it, the service's when it got it."""

    mode: SyncMode
    client_clocks: Sequence[ClockReading]
    host_clocks: Sequence[ClockReading]


class RelayEndpoint:
    """One relay connection: what it told the service about its machine."""

    def __init__(self, clients: RelayClients, machine_id: int, client_id: int) -> None:
        self._clients = clients
        self.machine_id = machine_id
        self.client_id = client_id
        self.serialized_system_info = b""
        self.synced_clocks: deque[ClockExchange] = deque(maxlen=SYNCED_CLOCKS_KEPT)

    def cache_system_info(self, serialized_system_info: bytes) -> None:
        """Keeps the relay machine's SystemInfo (a serialized message) for new sessions."""
        self.serialized_system_info = serialized_system_info

    def sync_clocks(
        self,
        mode: SyncMode,
        client_clocks: Sequence[ClockReading],
        host_clocks: Sequence[ClockReading],
    ) -> None:
        """Records one clock exchange (the oldest is dropped beyond SYNCED_CLOCKS_KEPT)."""
        self.synced_clocks.append(ClockExchange(mode, client_clocks, host_clocks))

    def disconnect(self) -> None:
        """The relay went away: its machine's info no longer goes into new sessions."""
        self._clients.disconnect(self)


class RelayClients:
    """The connected relays of a service running as `uid`, and their packets."""

    def __init__(self, uid: int) -> None:
        self._uid = uid
        self._endpoints: dict[tuple[int, int], RelayEndpoint] = {}
        self._clock_sync_emitted: weakref.WeakSet[TracingSession] = weakref.WeakSet()

    def __bool__(self) -> bool:
        return bool(self._endpoints)

    def connect(self, machine_id: int, client_id: int) -> RelayEndpoint:
        """A new relay connection of the machine `machine_id`."""
        endpoint = RelayEndpoint(self, machine_id, client_id)
        self._endpoints[machine_id, client_id] = endpoint
        return endpoint

    def disconnect(self, endpoint: RelayEndpoint) -> None:
        """Forgets a relay connection."""
        key = (endpoint.machine_id, endpoint.client_id)
        if self._endpoints.get(key) is endpoint:
            del self._endpoints[key]

    def system_info_packets(self) -> list[bytes]:
        """A SystemInfo packet per remote machine that reported one."""
        out: list[bytes] = []
        for endpoint in self._first_per_machine(lambda e: bool(e.serialized_system_info)):
            out.append(
                bytes_field(TracePacket_system_info_ID, endpoint.serialized_system_info)
                + self._header(endpoint.machine_id)
                + varint_field(
                    TracePacket_trusted_packet_sequence_id_ID, SERVICE_PACKET_SEQUENCE_ID
                )
            )
        return out

    def clock_sync_packets(self, session: TracingSession) -> list[bytes]:
        """Once per session (when relays are connected): a RemoteClockSync per machine."""
        if not self._endpoints or session in self._clock_sync_emitted:
            return []
        self._clock_sync_emitted.add(session)
        out: list[bytes] = []
        for endpoint in self._first_per_machine(lambda e: bool(e.synced_clocks)):
            body = b"".join(
                nested_field(
                    RemoteClockSync_synced_clocks_ID,
                    nested_field(
                        RemoteClockSync_SyncedClocks_client_clocks_ID,
                        clock_snapshot_clocks(exchange.client_clocks),
                    )
                    + nested_field(
                        RemoteClockSync_SyncedClocks_host_clocks_ID,
                        clock_snapshot_clocks(exchange.host_clocks),
                    ),
                )
                for exchange in endpoint.synced_clocks
            )
            out.append(
                nested_field(TracePacket_remote_clock_sync_ID, body)
                + self._header(endpoint.machine_id)
            )
        return out

    def _first_per_machine(self, usable: Callable[[RelayEndpoint], bool]) -> list[RelayEndpoint]:
        seen: set[int] = set()
        chosen: list[RelayEndpoint] = []
        for endpoint in self._endpoints.values():
            if endpoint.machine_id not in seen and usable(endpoint):
                seen.add(endpoint.machine_id)
                chosen.append(endpoint)
        return chosen

    def _header(self, machine_id: int) -> bytes:
        uid = self._uid - 2**32 if self._uid >= 2**31 else self._uid  # an int32 on the wire
        return varint_field(TracePacket_machine_id_ID, machine_id) + varint_field(
            TracePacket_trusted_uid_ID, uid % 2**64
        )
