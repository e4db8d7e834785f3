"""The track_event data source as the producer registers and instantiates it."""

from __future__ import annotations

from collections.abc import Callable

from perfetto_protos.common.data_source_descriptor_pb2 import DataSourceDescriptor
from perfetto_protos.config.data_source_config_pb2 import DataSourceConfig
from perfetto_protos.config.track_event.track_event_config_pb2 import TrackEventConfig
from perfetto_smb import BufferExhaustedPolicy, TraceWriter

from perfetto_client._categories import registry
from perfetto_client._producer import TracingProducer
from perfetto_client._track_event import TRACK_EVENT_DATA_SOURCE, TrackEventInstance

__all__ = ["TRACK_EVENT_DESCRIPTOR_ID", "TrackEventKind"]

TRACK_EVENT_DESCRIPTOR_ID = 1
"""The id that lets UpdateDataSource replace the descriptor when categories are added."""


class _TrackEventHandle:
    """The producer's handle on one track_event instance."""

    def __init__(self, instance: TrackEventInstance) -> None:
        self.instance = instance

    def start(self) -> None:
        registry.start_instance(self.instance)

    def stop(self, done: Callable[[], None]) -> None:
        self.instance.stopped = True
        registry.stop_instance(self.instance)
        done()

    def flush(self) -> None:
        """Chunks being written by application threads are scraped by the service."""

    def clear_incremental_state(self) -> None:
        self.instance.clear_incremental_state()


class TrackEventKind:
    """The track_event data source as the producer registers and instantiates it."""

    name = TRACK_EVENT_DATA_SOURCE

    def __init__(self, *, use_monotonic_clock: bool = False) -> None:
        self.use_monotonic_clock = use_monotonic_clock

    def descriptor(self) -> DataSourceDescriptor:
        """track_event, with every registered category in its TrackEventDescriptor."""
        desc = DataSourceDescriptor(
            name=TRACK_EVENT_DATA_SOURCE,
            id=TRACK_EVENT_DESCRIPTOR_ID,
            will_notify_on_start=True,
            will_notify_on_stop=True,
            handles_incremental_state_clear=True,
        )
        desc.track_event_descriptor.CopyFrom(registry.descriptor())
        return desc

    def setup(
        self, producer: TracingProducer, instance_id: int, config: DataSourceConfig
    ) -> _TrackEventHandle:
        """A new instance writing into the session buffer of `config`."""
        target_buffer = config.target_buffer

        def create() -> TraceWriter:
            return producer.create_trace_writer(target_buffer, BufferExhaustedPolicy.DROP)

        te_config = TrackEventConfig()
        te_config.CopyFrom(config.track_event_config)
        instance = TrackEventInstance(
            instance_id, te_config, create, use_monotonic_clock=self.use_monotonic_clock
        )
        return _TrackEventHandle(instance)
