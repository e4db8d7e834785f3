"""The service's record of connected relays, as it shows in sessions' traces."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from perfetto_service.core._relay_clients import SYNCED_CLOCKS_KEPT, RelayEndpoint, SyncMode
from perfetto_service.core._service_packets import ClockReading
from tracing_service_harness import FakeConsumer, ServiceEnv, simple_config

BOOTTIME = 6


@pytest.fixture
def env() -> Iterator[ServiceEnv]:
    service_env = ServiceEnv(uid=os.getuid())
    yield service_env
    service_env.close()


def _relay(env: ServiceEnv, machine_id: int, client_id: int) -> RelayEndpoint:
    return env.call(lambda: env.service.connect_relay_client(machine_id, client_id))


def _exchange(endpoint: RelayEndpoint, env: ServiceEnv, client_ns: int) -> None:
    env.call(
        lambda: endpoint.sync_clocks(
            SyncMode.UPDATE,
            [ClockReading(BOOTTIME, client_ns)],
            [ClockReading(BOOTTIME, client_ns + 5)],
        )
    )


def _session_trace(env: ServiceEnv) -> Any:
    consumer = FakeConsumer(env).connect()
    consumer.enable(simple_config())
    consumer.stop()
    return consumer.read_trace()


def _client_boottimes(trace: Any) -> dict[int, list[int]]:
    return {
        packet.machine_id: [
            e.client_clocks.clocks[0].timestamp for e in packet.remote_clock_sync.synced_clocks
        ]
        for packet in trace.packet
        if packet.HasField("remote_clock_sync")
    }


def test_a_session_gets_the_most_recent_exchanges_of_each_machine_once(env: ServiceEnv) -> None:
    first, same_machine, other = _relay(env, 7, 1), _relay(env, 7, 2), _relay(env, 9, 3)
    for number in range(SYNCED_CLOCKS_KEPT + 2):
        _exchange(first, env, 1000 + number)
    _exchange(same_machine, env, 5000)
    _exchange(other, env, 9000)
    consumer = FakeConsumer(env).connect()
    consumer.enable(simple_config())
    consumer.stop()
    trace = consumer.read_trace()
    assert _client_boottimes(trace) == {
        7: [1000 + n for n in range(2, SYNCED_CLOCKS_KEPT + 2)],
        9: [9000],
    }
    assert _client_boottimes(consumer.read_trace()) == {}


def test_system_info_of_each_relay_machine_is_tagged_with_its_machine_id(env: ServiceEnv) -> None:
    endpoint = _relay(env, 7, 1)
    info = b"\x22\x07relayed"  # SystemInfo.tracing_service_version = "relayed"
    env.call(lambda: endpoint.cache_system_info(info))
    trace = _session_trace(env)
    infos = {p.machine_id: p.system_info for p in trace.packet if p.HasField("system_info")}
    assert infos[7].tracing_service_version == "relayed"
    assert infos[0].tracing_service_version != "relayed"


def test_a_disconnected_relay_is_left_out_of_later_sessions(env: ServiceEnv) -> None:
    endpoint = _relay(env, 7, 1)
    _exchange(endpoint, env, 1000)
    env.call(endpoint.disconnect)
    trace = _session_trace(env)
    assert _client_boottimes(trace) == {}
    assert all(p.machine_id == 0 for p in trace.packet if p.HasField("system_info"))
