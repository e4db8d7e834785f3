"""The track_event data source as the producer registers and instantiates it."""

from __future__ import annotations

import time
from collections.abc import Callable

from perfetto_protos.common.data_source_descriptor_pb2 import DataSourceDescriptor
from perfetto_protos.config.data_source_config_pb2 import DataSourceConfig
from perfetto_protos.config.track_event.track_event_config_pb2 import TrackEventConfig
from perfetto_smb import BufferExhaustedPolicy, TraceWriter

from perfetto_client._categories import registry
from perfetto_client._console import CONSOLE_INTERCEPTOR, ConsoleSink
from perfetto_client._producer import TracingProducer, exhausted_policy
from perfetto_client._track_event import (
    TRACK_EVENT_DATA_SOURCE,
    StartupInstance,
    TrackEventInstance,
)
from perfetto_client._track_event_writer import boottime_ns

__all__ = ["TRACK_EVENT_DESCRIPTOR_ID", "TrackEventKind"]

TRACK_EVENT_DESCRIPTOR_ID = 1
"""The id that lets UpdateDataSource replace the descriptor when categories are added."""


class _TrackEventHandle:
    """The producer's handle on one track_event instance."""

    def __init__(
        self, instance: TrackEventInstance, startup: StartupInstance | None = None
    ) -> None:
        self.instance = instance
        self.startup = startup

    def start(self) -> None:
        startup = self.startup
        if startup is not None and startup.adopted_by is None and not startup.stopped:
            startup.adopted_by = self.instance
            startup.stopped = True
            registry.replace_instance(startup, self.instance)
        else:
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

    def __init__(
        self,
        *,
        use_monotonic_clock: bool = False,
        adopts_startup: bool = False,
        buffer_exhausted_policy: BufferExhaustedPolicy = BufferExhaustedPolicy.STALL_THEN_DROP,
    ) -> None:
        self.use_monotonic_clock = use_monotonic_clock
        self.buffer_exhausted_policy = buffer_exhausted_policy
        """The policy of instances whose config leaves `buffer_exhausted_policy` unspecified."""
        self.adopts_startup = adopts_startup
        self.startup: StartupInstance | None = None
        """The running startup instance the next session adopts (SYSTEM backend only)."""

    def start_startup_tracing(self, config: TrackEventConfig, max_bytes: int) -> StartupInstance:
        """Starts recording into memory until a session adopts it (or it is aborted)."""
        startup = StartupInstance(
            config, max_bytes=max_bytes, use_monotonic_clock=self.use_monotonic_clock
        )
        self.startup = startup
        registry.start_instance(startup)
        return startup

    def abort_startup_tracing(self, only: StartupInstance | None = None) -> None:
        """Drops the startup instance (if it is `only`, when given) unless a session adopted
        it."""
        startup = self.startup
        if startup is None or (only is not None and startup is not only):
            return
        self.startup = None
        if startup.adopted_by is None:
            startup.stopped = True
            registry.stop_instance(startup)

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
        policy = exhausted_policy(config, self.buffer_exhausted_policy)

        def create() -> TraceWriter | ConsoleSink:
            return producer.create_trace_writer(target_buffer, policy)

        if config.interceptor_config.name == CONSOLE_INTERCEPTOR:
            start = time.monotonic_ns() if self.use_monotonic_clock else boottime_ns()
            output = int(config.interceptor_config.console_config.output)

            def create() -> TraceWriter | ConsoleSink:
                return ConsoleSink(start, output)

        te_config = TrackEventConfig()
        te_config.CopyFrom(config.track_event_config)
        instance = TrackEventInstance(
            instance_id, te_config, create, use_monotonic_clock=self.use_monotonic_clock
        )
        startup = self.startup if self.adopts_startup and producer.adopts_startup else None
        if startup is not None:
            self.startup = None
        return _TrackEventHandle(instance, startup)
