"""The Perfetto tracing service (traced) and the internal producer/consumer API."""

from importlib.metadata import version as _version

from perfetto_service._buffer_reader import (
    DrainResult,
    TraceDrainResult,
    read_producer_packets,
    read_producer_packets_as_trace,
)
from perfetto_service._consumer_endpoint import ConsumerEndpointImpl
from perfetto_service._consumer_ipc_client import ENABLE_TRACING_REJECTED, ConsumerIPCClient
from perfetto_service._consumer_port import ConsumerPort, RemoteConsumer, split_service_state
from perfetto_service._errors import ServiceError
from perfetto_service._interfaces import (
    AsyncioTaskRunner,
    ClientIdentity,
    Consumer,
    ConsumerEndpoint,
    Producer,
    ProducerEndpoint,
    TaskRunner,
    TracePacketSlices,
)
from perfetto_service._packet_validator import (
    SERVICE_RESERVED_FIELDS,
    validate_packet,
    validate_packet_bytes,
    validate_packet_span,
)
from perfetto_service._producer_endpoint import ProducerEndpointImpl
from perfetto_service._producer_ipc_client import ProducerIPCClient
from perfetto_service._producer_port import ProducerPort, RemoteProducer
from perfetto_service._read_slicer import (
    IPC_BUFFER_SIZE,
    packet_preamble,
    read_buffers_replies,
    trace_file_bytes,
)
from perfetto_service._service_host import PRODUCER_SOCKET_SEND_TIMEOUT, ServiceIPCHost
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
    BufferedPacket,
    BufferStats,
    ChunkPayloadHistogram,
    OverwritePolicy,
    PacketRun,
    PacketSequenceProperties,
    PacketSpans,
    Patch,
    TraceBuffer,
)
from perfetto_service._tracing_service import (
    TRACING_SERVICE_VERSION,
    TracingService,
    flush_flags,
)
from perfetto_service._trusted_fields import SERVICE_PACKET_SEQUENCE_ID, TrustedFieldsWriter

__version__: str = _version("perfetto-service")

__all__ = [
    "CHUNK_PAYLOAD_HISTOGRAM_THRESHOLDS",
    "ENABLE_TRACING_REJECTED",
    "IPC_BUFFER_SIZE",
    "PRODUCER_SOCKET_SEND_TIMEOUT",
    "SERVICE_PACKET_SEQUENCE_ID",
    "SERVICE_RESERVED_FIELDS",
    "SYNC_MARKER",
    "TRACING_SERVICE_VERSION",
    "AsyncioTaskRunner",
    "BufferStats",
    "BufferedPacket",
    "ChunkPayloadHistogram",
    "ClientIdentity",
    "ClockReading",
    "Consumer",
    "ConsumerEndpoint",
    "ConsumerEndpointImpl",
    "ConsumerIPCClient",
    "ConsumerPort",
    "DrainResult",
    "OverwritePolicy",
    "PacketRun",
    "PacketSequenceProperties",
    "PacketSpans",
    "Patch",
    "Producer",
    "ProducerEndpoint",
    "ProducerEndpointImpl",
    "ProducerIPCClient",
    "ProducerPort",
    "RemoteConsumer",
    "RemoteProducer",
    "ServiceError",
    "ServiceIPCHost",
    "ServicePacketWriter",
    "SystemInfo",
    "TaskRunner",
    "TraceBuffer",
    "TraceDrainResult",
    "TracePacketSlices",
    "TracingService",
    "TracingServiceEventKind",
    "TrustedFieldsWriter",
    "__version__",
    "boot_time_ns",
    "capture_clock_snapshot",
    "collect_system_info",
    "flush_flags",
    "packet_preamble",
    "read_buffers_replies",
    "read_producer_packets",
    "read_producer_packets_as_trace",
    "split_service_state",
    "trace_file_bytes",
    "validate_packet",
    "validate_packet_bytes",
    "validate_packet_span",
]
