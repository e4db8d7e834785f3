"""A whole trace put together in ReadBuffers' emission order parses as upstream's Trace."""

from __future__ import annotations

from typing import Any

from perfetto_protos.common import trace_stats_pb2
from perfetto_protos.config import trace_config_pb2
from perfetto_protos.ipc import consumer_port_pb2
from perfetto_protos.tags.fields import (
    TracingServiceEvent_all_data_sources_started_ID,
    TracingServiceEvent_read_tracing_buffers_completed_ID,
    TracingServiceEvent_tracing_started_ID,
)
from perfetto_protos.trace import trace_packet_pb2
from perfetto_protos.upstream import parse_upstream_trace
from perfetto_service import trace_file_bytes
from perfetto_service.core._buffer_reader import read_producer_packets
from perfetto_service.core._read_slicer import read_buffers_replies
from perfetto_service.core._service_packets import (
    ServicePacketWriter,
    boot_time_ns,
    capture_clock_snapshot,
    collect_system_info,
)
from perfetto_service.core._trace_buffer import TraceBuffer
from perfetto_service.core._trusted_fields import TrustedFieldsWriter
from service_testlib import ChunkPacker, copy, seq


def test_service_and_producer_packets_make_a_trace_upstream_reads() -> None:
    uid = 1234
    service = ServicePacketWriter(uid)
    config = trace_config_pb2.TraceConfig()
    config.buffers.add().size_kb = 64
    config.data_sources.add().config.name = "perfetto.test"

    buffer = TraceBuffer(64 * 1024)
    for writer in (1, 2):
        packer = ChunkPacker(payload_size=256)
        for i in range(20):
            packet = trace_packet_pb2.TracePacket(timestamp=boot_time_ns())
            packet.for_testing.seq_value = writer * 100 + i
            packet.for_testing.str = "p" * (i * 13)
            packer.add(packet.SerializeToString())
        for chunk in packer.flush():
            copy(buffer, seq(producer=1, writer=writer, uid=2000, pid=77), chunk)

    started = boot_time_ns()
    head = [
        service.clock_snapshot(capture_clock_snapshot()),
        service.sync_marker(),
        service.trace_config(config.SerializeToString()),
        service.trace_uuid(0x1122334455667788, -5),
        service.system_info(collect_system_info("Perfetto v0.1 (perfetto-py)")),
        service.service_event(started, TracingServiceEvent_tracing_started_ID),
        service.service_event(started + 1, TracingServiceEvent_all_data_sources_started_ID),
    ]
    drained = read_producer_packets(buffer, TrustedFieldsWriter(), threshold=1 << 20)
    stats = trace_stats_pb2.TraceStats(invalid_packets=drained.invalid_packets)
    stats.buffer_stats.append(buffer.stats.to_proto())
    tail = [
        service.service_event(
            boot_time_ns(), TracingServiceEvent_read_tracing_buffers_completed_ID
        ),
        service.trace_stats(stats.SerializeToString()),
    ]
    packets = [[p] for p in head] + list(drained.packets) + [[p] for p in tail]

    from_file = trace_file_bytes(packets)
    trace: Any = parse_upstream_trace(from_file)
    kinds = [p.WhichOneof("data") for p in trace.packet]
    assert kinds[:7] == [
        "clock_snapshot",
        "synchronization_marker",
        "trace_config",
        "trace_uuid",
        "system_info",
        "service_event",
        "service_event",
    ]
    assert kinds[7:-2] == ["for_testing"] * 40
    assert kinds[-2:] == ["service_event", "trace_stats"]
    service_packets = trace.packet[:7] + trace.packet[-2:]
    assert {(p.trusted_uid, p.trusted_packet_sequence_id) for p in service_packets} == {(uid, 1)}
    producer_packets = trace.packet[7:-2]
    assert [p.for_testing.seq_value for p in producer_packets] == [
        writer * 100 + i for writer in (1, 2) for i in range(20)
    ]
    assert {p.trusted_packet_sequence_id for p in producer_packets} == {2, 3}
    assert {(p.trusted_uid, p.trusted_pid) for p in producer_packets} == {(2000, 77)}
    assert trace.packet[-1].trace_stats.buffer_stats[0].chunks_read == buffer.stats.chunks_read

    # Over IPC the consumer receives the very same packets.
    received: list[bytes] = []
    pending = b""
    for reply in read_buffers_replies(packets):
        for piece in consumer_port_pb2.ReadBuffersResponse.FromString(reply).slices:
            pending += piece.data
            if piece.last_slice_for_packet:
                received.append(pending)
                pending = b""
    assert trace_file_bytes([[packet] for packet in received]) == from_file
