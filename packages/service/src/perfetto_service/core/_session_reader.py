"""What one ReadBuffers pass of a session returns: service packets around producer packets.

With deflate compression (TraceConfig.compression), each pass is one compressed_packets
packet holding the pass's packets, as upstream's service writes it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence

from perfetto_protos.common.builtin_clock_pb2 import BUILTIN_CLOCK_BOOTTIME
from perfetto_protos.common.trace_stats_pb2 import TraceStats
from perfetto_protos.config.trace_config_pb2 import TraceConfig
from perfetto_protos.tags.fields import (
    TracingServiceEvent_read_tracing_buffers_completed_ID,
)

from perfetto_service.core._buffer_reader import (
    read_producer_packets,
    read_producer_packets_as_replies,
    read_producer_packets_as_trace,
)
from perfetto_service.core._read_slicer import (
    ReplyWriter,
    read_buffers_replies,
    trace_file_bytes,
)
from perfetto_service.core._relay_clients import RelayClients
from perfetto_service.core._service_packets import (
    ServicePacketWriter,
    SystemInfo,
    boot_time_ns,
)
from perfetto_service.core._session import TracingSession
from perfetto_service.core._session_packets import compressed_packets_packet, trigger_packet
from perfetto_service.core._trace_buffer import TraceBuffer


class SessionReader:
    """Reads sessions' buffers with the service packets upstream puts around their data.

    `buffers` are the service's buffers by global id; `machine_of` gives a producer's
    machine id; `trace_stats` and `system_info` build those packets when they are due;
    `relay_clients` adds the remote machines' SystemInfo and RemoteClockSync packets.
    """

    def __init__(
        self,
        writer: ServicePacketWriter,
        buffers: Mapping[int, TraceBuffer],
        *,
        machine_of: Callable[[int], int],
        trace_stats: Callable[[TracingSession], TraceStats],
        system_info: Callable[[], SystemInfo],
        relay_clients: RelayClients | None = None,
    ) -> None:
        self._relay_clients = relay_clients
        self._writer = writer
        self._buffers = buffers
        self._machine_of = machine_of
        self._trace_stats = trace_stats
        self._system_info = system_info

    def read_packets(
        self, session: TracingSession, threshold: int
    ) -> tuple[list[Sequence[bytes | memoryview]], bool]:
        """Reads about `threshold` bytes of the session: (packets, whether more is left).

        Service packets come first, in upstream's order, then producer packets buffer by
        buffer; the end-of-read events and trace stats come once the buffers are drained.
        A producer packet's slices are views into the buffer, valid until the next commit.
        """
        head = self._service_packets_before_data(session)
        packets: list[Sequence[bytes | memoryview]] = [(p,) for p in head]
        total = sum(map(len, head))
        has_more = False
        for buffer in self._session_buffers(session):
            result = read_producer_packets(buffer, session.trusted_fields, threshold - total)
            packets.extend(result.packets)
            total += result.size
            session.invalid_packets += result.invalid_packets
            if result.hit_threshold:
                has_more = True
                break
        packets.extend((p,) for p in self._service_packets_after_data(session, has_more))
        if packets and _wants_deflate(session.config):
            packets = [(compressed_packets_packet(trace_file_bytes(packets)),)]
        return packets, has_more

    def read_replies(self, session: TracingSession, threshold: int) -> tuple[list[bytes], bool]:
        """`read_packets`, as the serialized ReadBuffersResponse messages carrying them
        (`read_buffers_replies` of its packets), written with no object per packet."""
        if _wants_deflate(session.config):
            packets, has_more = self.read_packets(session, threshold)
            return read_buffers_replies(packets), has_more
        writer = ReplyWriter()
        head = self._service_packets_before_data(session)
        for packet in head:
            writer.add_packet((packet,))
        total = sum(map(len, head))
        has_more = False
        for buffer in self._session_buffers(session):
            result = read_producer_packets_as_replies(
                buffer, session.trusted_fields, threshold - total, writer
            )
            total += result.size
            session.invalid_packets += result.invalid_packets
            if result.hit_threshold:
                has_more = True
                break
        for packet in self._service_packets_after_data(session, has_more):
            writer.add_packet((packet,))
        return writer.replies(), has_more

    def read_trace(self, session: TracingSession, threshold: int) -> tuple[bytes, bool]:
        """`read_packets`, framed as trace-file bytes (what write_into_file writes)."""
        head = self._service_packets_before_data(session)
        parts = [trace_file_bytes((p,) for p in head)]
        total = sum(map(len, head))
        has_more = False
        for buffer in self._session_buffers(session):
            result = read_producer_packets_as_trace(
                buffer, session.trusted_fields, threshold - total
            )
            parts.append(result.trace)
            total += result.size
            session.invalid_packets += result.invalid_packets
            if result.hit_threshold:
                has_more = True
                break
        tail = self._service_packets_after_data(session, has_more)
        parts.append(trace_file_bytes((p,) for p in tail))
        trace = b"".join(parts)
        if trace and _wants_deflate(session.config):
            trace = trace_file_bytes([(compressed_packets_packet(trace),)])
        return trace, has_more

    def _session_buffers(self, session: TracingSession) -> Iterator[TraceBuffer]:
        for buffer_id in session.buffers_index:
            buffer = self._buffers.get(buffer_id)
            if buffer is not None:
                yield buffer

    def _service_packets_after_data(self, session: TracingSession, has_more: bool) -> list[bytes]:
        if has_more:
            return []
        out: list[bytes] = []
        if not session.config.builtin_data_sources.disable_service_events:
            session.record_lifecycle_event(
                TracingServiceEvent_read_tracing_buffers_completed_ID, boot_time_ns()
            )
            out.extend(self._lifecycle_packets(session))
        if session.should_emit_stats:
            stats = self._trace_stats(session).SerializeToString()
            out.append(self._writer.trace_stats(stats))
            session.should_emit_stats = False
        return out

    def _service_packets_before_data(self, session: TracingSession) -> list[bytes]:
        writer = self._writer
        builtin = session.config.builtin_data_sources
        primary_clock = builtin.primary_trace_clock or BUILTIN_CLOCK_BOOTTIME
        out: list[bytes] = []
        if session.initial_clock_snapshot:
            out.append(writer.clock_snapshot(session.initial_clock_snapshot, primary_clock))
            session.initial_clock_snapshot = []
        out.extend(writer.clock_snapshot(s, primary_clock) for s in session.clock_snapshot_ring)
        session.clock_snapshot_ring.clear()
        if session.should_emit_sync_marker:
            out.append(writer.sync_marker())
            session.should_emit_sync_marker = False
        if not builtin.disable_trace_config:
            if not session.did_emit_initial_packets:
                out.append(writer.trace_config(session.config.SerializeToString()))
            for trigger in session.received_triggers[session.num_triggers_emitted :]:
                out.append(trigger_packet(writer, trigger))
            session.num_triggers_emitted = len(session.received_triggers)
        if not session.did_emit_initial_packets:
            msb, lsb = session.trace_uuid
            out.append(writer.trace_uuid(msb, lsb))
            out.append(writer.trace_provenance(boot_time_ns(), self._provenance(session)))
            if not builtin.disable_system_info:
                out.append(writer.system_info(self._system_info()))
                if self._relay_clients:
                    out.extend(self._relay_clients.system_info_packets())
        session.did_emit_initial_packets = True
        if not builtin.disable_service_events:
            out.extend(self._lifecycle_packets(session))
        if self._relay_clients and not builtin.disable_clock_snapshotting:
            out.extend(self._relay_clients.clock_sync_packets(session))
        return out

    def _provenance(self, session: TracingSession) -> list[list[tuple[int, int]]]:
        buffers: list[list[tuple[int, int]]] = []
        for buffer_id in session.buffers_index:
            sequences: list[tuple[int, int]] = []
            buffers.append(sequences)
            buffer = self._buffers.get(buffer_id)
            if buffer is None:
                continue
            for producer_id, writer_id in buffer.writer_stats:
                machine_id = self._machine_of(producer_id)
                sequence_id = session.trusted_fields.sequence_id(machine_id, producer_id, writer_id)
                sequences.append((sequence_id, producer_id))
        return buffers

    def _lifecycle_packets(self, session: TracingSession) -> list[bytes]:
        writer = self._writer
        timestamped: list[tuple[int, bytes]] = []
        for event, timestamps in session.lifecycle_events.items():
            timestamped.extend((ts, writer.service_event(ts, event)) for ts in timestamps)
            timestamps.clear()
        if session.slow_start_event is not None:
            timestamped.append(session.slow_start_event)
            session.slow_start_event = None
        timestamped.extend(session.last_flush_events)
        session.last_flush_events.clear()
        timestamped.sort(key=lambda item: item[0])
        return [packet for _, packet in timestamped]


def _wants_deflate(config: TraceConfig) -> bool:
    """Whether the session's packets are deflated (zstd is not available: left as is)."""
    return config.compression.HasField("deflate") or (
        config.compression_type == TraceConfig.COMPRESSION_TYPE_DEFLATE
    )
