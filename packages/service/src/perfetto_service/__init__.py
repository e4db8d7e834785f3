"""The Perfetto tracing service (traced) and the internal producer/consumer API."""

from importlib.metadata import version as _version

from perfetto_service._buffer_reader import DrainResult, read_producer_packets
from perfetto_service._errors import ServiceError
from perfetto_service._packet_validator import (
    SERVICE_RESERVED_FIELDS,
    validate_packet,
    validate_packet_bytes,
)
from perfetto_service._read_slicer import (
    IPC_BUFFER_SIZE,
    packet_preamble,
    read_buffers_replies,
    trace_file_bytes,
)
from perfetto_service._service_packets import (
    SYNC_MARKER,
    ClockReading,
    ServicePacketWriter,
    SystemInfo,
    TracingServiceEventKind,
    boot_time_ns,
    capture_clock_snapshot,
    collect_system_info,
)
from perfetto_service._trace_buffer import (
    CHUNK_PAYLOAD_HISTOGRAM_THRESHOLDS,
    PACKET_SIZE_DROP_PACKET,
    BufferedPacket,
    BufferStats,
    ChunkFlags,
    ChunkPayloadHistogram,
    OverwritePolicy,
    PacketRun,
    PacketSequenceProperties,
    Patch,
    TraceBuffer,
)
from perfetto_service._trusted_fields import SERVICE_PACKET_SEQUENCE_ID, TrustedFieldsWriter

__version__: str = _version("perfetto-service")

__all__ = [
    "CHUNK_PAYLOAD_HISTOGRAM_THRESHOLDS",
    "IPC_BUFFER_SIZE",
    "PACKET_SIZE_DROP_PACKET",
    "SERVICE_PACKET_SEQUENCE_ID",
    "SERVICE_RESERVED_FIELDS",
    "SYNC_MARKER",
    "BufferStats",
    "BufferedPacket",
    "ChunkFlags",
    "ChunkPayloadHistogram",
    "ClockReading",
    "DrainResult",
    "OverwritePolicy",
    "PacketRun",
    "PacketSequenceProperties",
    "Patch",
    "ServiceError",
    "ServicePacketWriter",
    "SystemInfo",
    "TraceBuffer",
    "TracingServiceEventKind",
    "TrustedFieldsWriter",
    "__version__",
    "boot_time_ns",
    "capture_clock_snapshot",
    "collect_system_info",
    "packet_preamble",
    "read_buffers_replies",
    "read_producer_packets",
    "trace_file_bytes",
    "validate_packet",
    "validate_packet_bytes",
]
