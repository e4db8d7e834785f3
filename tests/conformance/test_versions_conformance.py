"""Producers and a consumer of one version against the `traced` of another: nothing lost.

Each test runs for every pair (clients, traced) of the versions under test (see conftest.py);
one session per pair records a custom data source and track events from two producers of
the service's producer API, another one those of an app of the client library (when the
clients' version has it).
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest
from agent import (
    CLIENT_SLICE,
    CLIENT_SOURCE,
    CUSTOM,
    EVENT_NAMES,
    TRACK_EVENT,
    track_uuid,
)
from kit import Agent, Traced, Version
from perfetto_protos.upstream import parse_upstream_trace

COUNT = 2000
PRODUCERS = ("conformance.p1", "conformance.p2")
TYPE_SLICE_BEGIN = 1
TYPE_SLICE_END = 2


@pytest.fixture(scope="module")
def trace(combination: tuple[Version, Version], tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The trace of one session of the combination."""
    return record(*combination, tmp_path_factory.mktemp("session"), [CUSTOM, TRACK_EVENT])


def record(clients: Version, service: Version, directory: Path, data_sources: list[str]) -> Any:
    """Runs two producers and a consumer of `clients` against `service`; the parsed trace."""
    out = directory / "trace.pftrace"
    with Traced(service, directory) as traced:
        agents = [
            Agent(clients, "producer", traced.producer_socket, name, str(COUNT))
            for name in PRODUCERS
        ]
        reader = Agent(clients, "consumer", traced.consumer_socket, str(out), *data_sources)
        try:
            for agent in agents:
                agent.wait_line("CONNECTED")
            reader.wait_line("ENABLED")
            for agent in agents:
                agent.wait_line("WROTE", len(data_sources))
            reader.send("stop")
            assert reader.wait_line("FLUSHED") == ["FLUSHED True"]
            done = reader.wait_line("DONE")[0].split(" ", 2)
            assert json.loads(done[2]) == ""
        finally:
            for agent in [*agents, reader]:
                agent.close()
    return parse_upstream_trace(out.read_bytes())


def test_the_service_lost_nothing(trace: Any) -> None:
    assert_nothing_lost(trace)


def assert_nothing_lost(trace: Any) -> None:
    stats = [packet.trace_stats for packet in trace.packet if packet.HasField("trace_stats")]
    assert stats, "the service wrote no TraceStats"
    for buffer in stats[-1].buffer_stats:
        assert buffer.chunks_discarded == 0
        assert buffer.chunks_overwritten == 0
        assert buffer.abi_violations == 0
        assert buffer.trace_writer_packet_loss == 0
    lost = [packet for packet in trace.packet if packet.previous_packet_dropped]
    first_of_sequence = {packet.trusted_packet_sequence_id for packet in lost}
    assert len(lost) == len(first_of_sequence), "a sequence dropped packets in the middle"


def test_custom_data_source_packets_arrive_exactly_once_in_order(trace: Any) -> None:
    by_producer: dict[str, list[int]] = defaultdict(list)
    sequences: dict[str, set[int]] = defaultdict(set)
    for packet in trace.packet:
        if packet.HasField("for_testing"):
            name, _, number = packet.for_testing.str.rpartition("/")
            assert int(number) == packet.for_testing.seq_value
            by_producer[name].append(packet.for_testing.seq_value)
            sequences[name].add(packet.trusted_packet_sequence_id)
    assert sorted(by_producer) == sorted(PRODUCERS)
    for name in PRODUCERS:
        assert by_producer[name] == list(range(COUNT))
    assert all(len(ids) == 1 for ids in sequences.values())
    assert len({next(iter(ids)) for ids in sequences.values()}) == len(PRODUCERS)


def test_track_event_slices_resolve_to_their_names_and_tracks(trace: Any) -> None:
    names: dict[int, dict[int, str]] = defaultdict(dict)
    tracks: dict[int, str] = {}
    slices: dict[str, Counter[str]] = defaultdict(Counter)
    depth: dict[int, int] = defaultdict(int)
    last_timestamp: dict[int, int] = {}
    for packet in trace.packet:
        sequence = packet.trusted_packet_sequence_id
        for entry in packet.interned_data.event_names:
            names[sequence][entry.iid] = entry.name
        if packet.HasField("track_descriptor"):
            tracks[packet.track_descriptor.uuid] = packet.track_descriptor.name
        if not packet.HasField("track_event"):
            continue
        assert packet.timestamp >= last_timestamp.get(sequence, 0)
        last_timestamp[sequence] = packet.timestamp
        event = packet.track_event
        producer = tracks[event.track_uuid]
        if event.type == TYPE_SLICE_BEGIN:
            depth[event.track_uuid] += 1
            slices[producer][names[sequence][event.name_iid]] += 1
        else:
            assert event.type == TYPE_SLICE_END
            depth[event.track_uuid] -= 1
            assert depth[event.track_uuid] == 0
    assert sorted(tracks.values()) == sorted(PRODUCERS)
    assert all(track_uuid(name) == uuid for uuid, name in tracks.items())
    expected = Counter(EVENT_NAMES[n % len(EVENT_NAMES)] for n in range(COUNT))
    assert dict(slices) == dict.fromkeys(PRODUCERS, expected)


@pytest.fixture(scope="module")
def client_trace(
    combination: tuple[Version, Version], tmp_path_factory: pytest.TempPathFactory
) -> Any:
    """The trace of a session recording an app of the clients' client library."""
    clients, service = combination
    if not clients.traits["client"]:
        pytest.skip(f"{clients} has no client library")
    directory = tmp_path_factory.mktemp("client")
    out = directory / "trace.pftrace"
    with Traced(service, directory) as traced:
        env = {"PERFETTO_PRODUCER_SOCK_NAME": traced.producer_socket}
        app = Agent(clients, "client", "conformance.app", str(COUNT), env=env)
        reader = Agent(
            clients, "consumer", traced.consumer_socket, str(out), TRACK_EVENT, CLIENT_SOURCE
        )
        try:
            app.wait_line("CONNECTED")
            reader.wait_line("ENABLED")
            app.wait_line("WROTE")
            reader.send("stop")
            assert reader.wait_line("FLUSHED") == ["FLUSHED True"]
            reader.wait_line("DONE")
        finally:
            for agent in (app, reader):
                agent.close()
    return parse_upstream_trace(out.read_bytes())


def test_client_library_events_arrive_exactly_once(client_trace: Any) -> None:
    assert_nothing_lost(client_trace)
    custom = [p.for_testing.str for p in client_trace.packet if p.HasField("for_testing")]
    assert custom == [f"conformance.app/{n}" for n in range(COUNT)]
    names: dict[int, dict[int, str]] = defaultdict(dict)
    begins: Counter[str] = Counter()
    ends = 0
    for packet in client_trace.packet:
        sequence = packet.trusted_packet_sequence_id
        if packet.sequence_flags & 1:
            names[sequence].clear()
        for entry in packet.interned_data.event_names:
            names[sequence][entry.iid] = entry.name
        if not packet.HasField("track_event"):
            continue
        event = packet.track_event
        if event.type == TYPE_SLICE_BEGIN:
            begins[event.name or names[sequence][event.name_iid]] += 1
        elif event.type == TYPE_SLICE_END:
            ends += 1
    assert begins == {CLIENT_SLICE: COUNT}
    assert ends == COUNT
