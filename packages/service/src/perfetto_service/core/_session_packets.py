"""Service packets that depend on a session: triggers, slow data sources, compression."""

from __future__ import annotations

import zlib
from collections.abc import Sequence

from protozero import encode_varint

from perfetto_service.core._field_encoding import bytes_field, nested_field, varint_field
from perfetto_service.core._service_packets import ServicePacketWriter
from perfetto_service.core._session import TriggerInfo

_TIMESTAMP = 8
_TRIGGER = 46
_SERVICE_EVENT = 69
_COMPRESSED_PACKETS_TAG = encode_varint((50 << 3) | 2)
_DEFLATE_LEVEL = 6


def _int32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def trigger_packet(writer: ServicePacketWriter, trigger: TriggerInfo) -> bytes:
    """The `trigger` packet recording one trigger a session received."""
    body = (
        bytes_field(1, trigger.trigger_name.encode())
        + bytes_field(2, trigger.producer_name.encode())
        + varint_field(3, _int32(trigger.producer_uid))
        + varint_field(4, trigger.stop_delay_ms)
    )
    return (
        nested_field(_TRIGGER, body)
        + varint_field(_TIMESTAMP, trigger.boot_time_ns)
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
        nested_field(1, bytes_field(1, producer.encode()) + bytes_field(2, name.encode()))
        for producer, name in data_sources
    )
    return (
        varint_field(_TIMESTAMP, timestamp)
        + writer.header
        + nested_field(_SERVICE_EVENT, nested_field(event, body))
    )


def compressed_packets_packet(trace: bytes) -> bytes:
    """The packet holding `trace` (framed packets) deflated, in compressed_packets."""
    compressed = zlib.compress(trace, _DEFLATE_LEVEL)
    return _COMPRESSED_PACKETS_TAG + encode_varint(len(compressed)) + compressed
