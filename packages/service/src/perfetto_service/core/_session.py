"""The state of one tracing session and of its data source instances (no behaviour of note)."""

from __future__ import annotations

import collections
import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from perfetto_protos.common.trace_stats_pb2 import TraceStats
from perfetto_protos.config.data_source_config_pb2 import DataSourceConfig
from perfetto_protos.config.trace_config_pb2 import TraceConfig
from perfetto_protos.tags.fields import (
    TracingServiceEvent_all_data_sources_flushed_ID,
    TracingServiceEvent_flush_started_ID,
)

from perfetto_service.core._service_packets import ClockReading
from perfetto_service.core._trusted_fields import TrustedFieldsWriter
from perfetto_service.core._write_into_file import TraceFileWriter

if TYPE_CHECKING:
    from perfetto_service.core._consumer_endpoint import ConsumerEndpointImpl

DEFAULT_FLUSH_TIMEOUT_MS = 5000
"""Flush timeout when TraceConfig.flush_timeout_ms is 0 (kDefaultFlushTimeoutMs)."""
DEFAULT_DATA_SOURCE_STOP_TIMEOUT_MS = 5000
"""Stop ack timeout when TraceConfig.data_source_stop_timeout_ms is 0."""
CLOCK_SNAPSHOT_RING_SIZE = 16
"""How many drift clock snapshots a session keeps until the next read."""

ClockSnapshot = list[ClockReading]


class SessionState(enum.Enum):
    """Where a session is in its life (upstream's TracingSession::State)."""

    DISABLED = "DISABLED"
    CONFIGURED = "CONFIGURED"
    STARTED = "STARTED"
    DISABLING_WAITING_STOP_ACKS = "STOP_WAIT"
    CLONED_READ_ONLY = "CLONED_READ_ONLY"


class InstanceState(enum.Enum):
    """Where a data source instance is in its life."""

    CONFIGURED = 0
    STARTING = 1
    STARTED = 2
    STOPPING = 3
    STOPPED = 4


@dataclass
class DataSourceInstance:
    """One data source of one producer, enabled by one session."""

    producer_id: int
    instance_id: int
    data_source_name: str
    config: DataSourceConfig
    will_notify_on_start: bool
    will_notify_on_stop: bool
    handles_incremental_state_clear: bool
    no_flush: bool
    state: InstanceState = InstanceState.CONFIGURED


@dataclass
class PendingFlush:
    """A flush waiting for acks from `producers`."""

    callback: Callable[[bool], None]
    producers: set[int] = field(default_factory=set)


@dataclass(frozen=True)
class TriggerInfo:
    """A trigger a session received."""

    boot_time_ns: int
    trigger_name: str
    producer_name: str
    producer_uid: int
    stop_delay_ms: int


class FlushStrategy(enum.Enum):
    """Whether and how the service flushes a session on its own."""

    DISABLED = 0
    PERIODIC = 1
    ON_WRITE = 2


class TracingSession:
    """Everything the service keeps about one session."""

    def __init__(
        self,
        session_id: int,
        consumer: ConsumerEndpointImpl,
        config: TraceConfig,
        trace_uuid: tuple[int, int],
    ) -> None:
        self.id = session_id
        self.consumer: ConsumerEndpointImpl | None = consumer
        self.consumer_uid = consumer.uid
        self.config = config
        self.trace_uuid = trace_uuid
        """(msb, lsb)."""
        self.state = SessionState.DISABLED
        self.buffers_index: list[int] = []
        self.data_source_instances: list[DataSourceInstance] = []
        self.trusted_fields = TrustedFieldsWriter()
        self.pending_flushes: dict[int, PendingFlush] = {}
        self.received_triggers: list[TriggerInfo] = []
        self.num_triggers_emitted = 0
        self.detach_key = ""
        self.did_notify_all_data_sources_started = False
        self.did_emit_initial_packets = False
        self.should_emit_sync_marker = False
        self.should_emit_stats = False
        self.initial_clock_snapshot: ClockSnapshot = []
        self.clock_snapshot_ring: collections.deque[ClockSnapshot] = collections.deque(
            maxlen=CLOCK_SNAPSHOT_RING_SIZE
        )
        # Lifecycle events by TracingServiceEvent field, oldest first; most keep one timestamp.
        self.lifecycle_events: dict[int, collections.deque[int]] = {
            TracingServiceEvent_all_data_sources_flushed_ID: collections.deque(maxlen=64),
            TracingServiceEvent_flush_started_ID: collections.deque(maxlen=64),
        }
        self.slow_start_event: tuple[int, bytes] | None = None
        """The slow_starting_data_sources packet (with its timestamp), until the next read."""
        self.last_flush_events: list[tuple[int, bytes]] = []
        """last_flush_slow_data_sources packets (with their timestamps), until the next read."""
        self.invalid_packets = 0
        self.flushes_requested = 0
        self.flushes_succeeded = 0
        self.flushes_failed = 0
        self.final_flush_outcome = TraceStats.FINAL_FLUSH_UNSPECIFIED
        self.flush_strategy = FlushStrategy.DISABLED
        self.periodic_flush_ms = 0
        self.file_writer: TraceFileWriter | None = None
        self.write_period_ms = 0
        self.end_error = ""
        """Why the session ended, when an error ended it (the consumer is told)."""
        self.snapshot_generation = 0
        """Bumped to cancel the periodic snapshot task."""

    @property
    def flush_timeout_ms(self) -> int:
        """The session's flush timeout."""
        return self.config.flush_timeout_ms or DEFAULT_FLUSH_TIMEOUT_MS

    @property
    def data_source_stop_timeout_ms(self) -> int:
        """How long the service waits for stop acks."""
        return self.config.data_source_stop_timeout_ms or DEFAULT_DATA_SOURCE_STOP_TIMEOUT_MS

    @property
    def trigger_mode(self) -> int:
        """TraceConfig.TriggerConfig.TriggerMode, UNSPECIFIED without triggers."""
        return int(self.config.trigger_config.trigger_mode)

    def instance(self, producer_id: int, instance_id: int) -> DataSourceInstance | None:
        """The instance `instance_id` of producer `producer_id`, if this session has it."""
        for inst in self.data_source_instances:
            if inst.producer_id == producer_id and inst.instance_id == instance_id:
                return inst
        return None

    def all_instances_started(self) -> bool:
        """Whether every instance reached STARTED."""
        return all(i.state is InstanceState.STARTED for i in self.data_source_instances)

    def all_instances_stopped(self) -> bool:
        """Whether every instance reached STOPPED."""
        return all(i.state is InstanceState.STOPPED for i in self.data_source_instances)

    def is_waiting_for_trigger(self) -> bool:
        """Whether the session has triggers and none fired: it reads as empty then."""
        return bool(self.config.trigger_config.triggers) and not self.received_triggers

    def record_lifecycle_event(self, event: int, timestamp: int) -> None:
        """Remembers that `event` happened at `timestamp` (BOOTTIME ns) until the next read."""
        timestamps = self.lifecycle_events.get(event)
        if timestamps is None:
            timestamps = self.lifecycle_events[event] = collections.deque(maxlen=1)
        timestamps.append(timestamp)
