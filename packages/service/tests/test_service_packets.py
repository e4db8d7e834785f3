"""The service's own packets, checked against upstream's schema and the bytes upstream writes."""

from __future__ import annotations

import os
import time
from typing import Any

import pytest
from perfetto_protos.common import trace_stats_pb2
from perfetto_protos.config import trace_config_pb2
from perfetto_protos.tags.fields import (
    TracingServiceEvent_all_data_sources_flushed_ID,
    TracingServiceEvent_all_data_sources_started_ID,
    TracingServiceEvent_buffer_cloned_ID,
    TracingServiceEvent_read_tracing_buffers_completed_ID,
    TracingServiceEvent_tracing_disabled_ID,
    TracingServiceEvent_tracing_started_ID,
)
from perfetto_protos.upstream import parse_upstream_trace
from perfetto_service import trace_file_bytes
from perfetto_service.core._service_packets import (
    SYNC_MARKER,
    ServicePacketWriter,
    boot_time_ns,
    capture_clock_snapshot,
    collect_system_info,
)
from perfetto_service.core._trace_buffer import BufferStats


def _parse(packet: bytes) -> Any:
    trace: Any = parse_upstream_trace(trace_file_bytes([[packet]]))
    (parsed,) = trace.packet
    return parsed


def _assert_service_header(packet: Any, uid: int) -> None:
    assert packet.trusted_uid == uid
    assert packet.trusted_packet_sequence_id == 1
    assert packet.timestamp_clock_id == 6


def test_sync_marker_is_upstreams_bytes() -> None:
    # Upstream's EmitSyncMarker: trusted_uid, trusted_packet_sequence_id 1, then the marker
    # last (readers resynchronize on it), with no other field.
    framed = trace_file_bytes([[ServicePacketWriter(0).sync_marker()]])
    assert framed == bytes.fromhex(
        "0a17180050 01a20210 82477a76b28d42ba81dc33326d57a079".replace(" ", "")
    )
    framed_1000 = trace_file_bytes([[ServicePacketWriter(1000).sync_marker()]])
    assert framed_1000.startswith(bytes.fromhex("0a1818e8075001a20210"))
    assert framed_1000.endswith(SYNC_MARKER)
    assert _parse(ServicePacketWriter(1000).sync_marker()).synchronization_marker == SYNC_MARKER


def test_clock_snapshot_holds_linux_clocks_in_upstreams_order() -> None:
    before = boot_time_ns()
    readings = capture_clock_snapshot()
    after = boot_time_ns()
    assert [r.clock_id for r in readings] == [6, 2, 4, 1, 3, 5]
    assert before <= readings[0].timestamp <= after
    realtime = dict(readings)[1]
    assert abs(realtime - time.time_ns()) < 5_000_000_000
    packet = _parse(ServicePacketWriter(1000).clock_snapshot(readings))
    _assert_service_header(packet, 1000)
    assert packet.clock_snapshot.primary_trace_clock == 6
    assert [(c.clock_id, c.timestamp) for c in packet.clock_snapshot.clocks] == readings
    assert not packet.HasField("timestamp")


def test_trace_config_packet_echoes_the_config() -> None:
    config = trace_config_pb2.TraceConfig()
    buffer = config.buffers.add()
    buffer.size_kb = 1024
    buffer.fill_policy = trace_config_pb2.TraceConfig.BufferConfig.DISCARD
    config.data_sources.add().config.name = "track_event"
    config.duration_ms = 2500
    packet = _parse(ServicePacketWriter(0).trace_config(config.SerializeToString()))
    _assert_service_header(packet, 0)
    assert packet.trace_config.buffers[0].size_kb == 1024
    assert packet.trace_config.buffers[0].fill_policy == 2
    assert packet.trace_config.data_sources[0].config.name == "track_event"
    assert packet.trace_config.duration_ms == 2500


def test_trace_uuid_keeps_the_sign_of_both_halves() -> None:
    packet = _parse(ServicePacketWriter(7).trace_uuid(msb=-2, lsb=(1 << 63) + 5))
    _assert_service_header(packet, 7)
    assert packet.trace_uuid.msb == -2
    assert packet.trace_uuid.lsb == -(1 << 63) + 5


def test_system_info_describes_this_machine() -> None:
    info = collect_system_info("Perfetto v0.1 (perfetto-py)")
    packet = _parse(ServicePacketWriter(1000).system_info(info))
    _assert_service_header(packet, 1000)
    system_info = packet.system_info
    uname = os.uname()
    assert system_info.utsname.sysname == uname.sysname
    assert system_info.utsname.release == uname.release
    assert system_info.utsname.machine == uname.machine
    assert system_info.tracing_service_version == "Perfetto v0.1 (perfetto-py)"
    assert system_info.page_size == os.sysconf("SC_PAGESIZE")
    assert system_info.num_cpus == os.cpu_count()
    assert system_info.system_ram_bytes > 0
    assert system_info.timezone_off_mins == time.localtime().tm_gmtoff // 60


@pytest.mark.parametrize(
    ("kind", "name"),
    [
        (TracingServiceEvent_tracing_started_ID, "tracing_started"),
        (TracingServiceEvent_all_data_sources_started_ID, "all_data_sources_started"),
        (TracingServiceEvent_all_data_sources_flushed_ID, "all_data_sources_flushed"),
        (TracingServiceEvent_read_tracing_buffers_completed_ID, "read_tracing_buffers_completed"),
        (TracingServiceEvent_tracing_disabled_ID, "tracing_disabled"),
    ],
)
def test_service_events_are_timestamped_lifecycle_packets(kind: int, name: str) -> None:
    timestamp = boot_time_ns()
    packet = _parse(ServicePacketWriter(1000).service_event(timestamp, kind))
    _assert_service_header(packet, 1000)
    assert packet.timestamp == timestamp
    assert packet.service_event.WhichOneof("event_type") == name


def test_buffer_cloned_event_carries_the_buffer_index() -> None:
    packet = _parse(
        ServicePacketWriter(0).service_event(5, TracingServiceEvent_buffer_cloned_ID, 3)
    )
    assert packet.service_event.buffer_cloned == 3


def test_trace_stats_packet_carries_buffer_stats() -> None:
    stats = BufferStats(4096)
    stats.chunks_written = 12
    stats.abi_violations = 2
    trace_stats = trace_stats_pb2.TraceStats(invalid_packets=3)
    trace_stats.buffer_stats.append(stats.to_proto())
    packet = _parse(ServicePacketWriter(1000).trace_stats(trace_stats.SerializeToString()))
    _assert_service_header(packet, 1000)
    assert packet.trace_stats.invalid_packets == 3
    assert packet.trace_stats.buffer_stats[0].chunks_written == 12
    assert packet.trace_stats.buffer_stats[0].abi_violations == 2
    assert packet.trace_stats.buffer_stats[0].buffer_size == 4096


def test_machine_id_is_added_only_for_an_adopted_machine() -> None:
    assert not _parse(ServicePacketWriter(0).trace_uuid(1, 2)).HasField("machine_id")
    assert _parse(ServicePacketWriter(0, machine_id=77).trace_uuid(1, 2)).machine_id == 77


def test_trace_provenance_lists_each_buffers_sequences() -> None:
    timestamp = boot_time_ns()
    packet = _parse(ServicePacketWriter(9).trace_provenance(timestamp, [[(2, 1), (3, 4)], []]))
    _assert_service_header(packet, 9)
    assert packet.timestamp == timestamp
    buffers = packet.trace_provenance.buffers
    assert [[(s.id, s.producer_id) for s in b.sequences] for b in buffers] == [[(2, 1), (3, 4)], []]


def test_service_packet_bytes_follow_upstreams_field_order_and_length_compaction() -> None:
    packet = ServicePacketWriter(1000).trace_uuid(msb=1, lsb=2)
    header = bytes.fromhex("18e8075001d00306")  # uid 1000, sequence 1, BOOTTIME
    # Upstream writes the header fields, then trace_uuid with lsb before msb.
    assert packet == header + bytes.fromhex("ca050410020801")
    # A nested message past 127 bytes keeps protozero's 4-byte length.
    big = ServicePacketWriter(0).trace_config(bytes(200))
    assert big[len(ServicePacketWriter(0).header) :][:6] == bytes.fromhex("8a02c8818000")
