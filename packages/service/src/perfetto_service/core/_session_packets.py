"""Service packets that depend on a session: triggers, slow data sources, compression."""

from __future__ import annotations

import zlib
from collections.abc import Sequence

from perfetto_protos.tags.fields import (
    TracePacket_compressed_packets_TAG,
    TracePacket_service_event_ID,
    TracePacket_timestamp_ID,
    TracePacket_trigger_ID,
    TracingServiceEvent_DataSources_data_source_ID,
    TracingServiceEvent_DataSources_DataSource_data_source_name_ID,
    TracingServiceEvent_DataSources_DataSource_producer_name_ID,
    Trigger_producer_name_ID,
    Trigger_stop_delay_ms_ID,
    Trigger_trigger_name_ID,
    Trigger_trusted_producer_uid_ID,
)
from protozero import encode_varint

from perfetto_service.core._field_encoding import bytes_field, nested_field, varint_field
from perfetto_service.core._service_packets import ServicePacketWriter
from perfetto_service.core._session import TriggerInfo

_COMPRESSED_PACKETS_TAG = encode_varint(TracePacket_compressed_packets_TAG)
_DEFLATE_LEVEL = 6


def _int32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def trigger_packet(writer: ServicePacketWriter, trigger: TriggerInfo) -> bytes:
    """The `trigger` packet recording one trigger a session received."""
    body = (
        bytes_field(Trigger_trigger_name_ID, trigger.trigger_name.encode())
        + bytes_field(Trigger_producer_name_ID, trigger.producer_name.encode())
        + varint_field(Trigger_trusted_producer_uid_ID, _int32(trigger.producer_uid))
        + varint_field(Trigger_stop_delay_ms_ID, trigger.stop_delay_ms)
    )
    return (
        nested_field(TracePacket_trigger_ID, body)
        + varint_field(TracePacket_timestamp_ID, trigger.boot_time_ns)
        + writer.header
    )


def data_sources_event_packet(
    writer: ServicePacketWriter,
    timestamp: int,
    event: int,
    data_sources: Sequence[tuple[str, str]],
) -> bytes:
    """A service_event packet whose member `event` lists (producer, data source) names."""
    body = b"".join(
        nested_field(
            TracingServiceEvent_DataSources_data_source_ID,
            bytes_field(
                TracingServiceEvent_DataSources_DataSource_producer_name_ID, producer.encode()
            )
            + bytes_field(
                TracingServiceEvent_DataSources_DataSource_data_source_name_ID, name.encode()
            ),
        )
        for producer, name in data_sources
    )
    return (
        varint_field(TracePacket_timestamp_ID, timestamp)
        + writer.header
        + nested_field(TracePacket_service_event_ID, nested_field(event, body))
    )


def compressed_packets_packet(trace: bytes) -> bytes:
    """The packet holding `trace` (framed packets) deflated, in compressed_packets."""
    compressed = zlib.compress(trace, _DEFLATE_LEVEL)
    return _COMPRESSED_PACKETS_TAG + encode_varint(len(compressed)) + compressed
