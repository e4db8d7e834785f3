"""The client's producer: registers data sources and drives their instances for one backend."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Protocol

from perfetto_protos.common.data_source_descriptor_pb2 import DataSourceDescriptor
from perfetto_protos.config.data_source_config_pb2 import DataSourceConfig
from perfetto_service import ProducerEndpoint
from perfetto_smb import BufferExhaustedPolicy, SharedMemoryArbiter, TraceWriter

__all__ = [
    "DataSourceInstanceHandle",
    "DataSourceKind",
    "ProducerHost",
    "TracingProducer",
    "exhausted_policy",
]

_log = logging.getLogger("perfetto_client")

_CONFIG_POLICIES = {
    DataSourceConfig.BUFFER_EXHAUSTED_DROP: BufferExhaustedPolicy.DROP,
    DataSourceConfig.BUFFER_EXHAUSTED_STALL_THEN_ABORT: BufferExhaustedPolicy.STALL,
    DataSourceConfig.BUFFER_EXHAUSTED_STALL_THEN_DROP: BufferExhaustedPolicy.STALL_THEN_DROP,
}


def exhausted_policy(
    config: DataSourceConfig, default: BufferExhaustedPolicy
) -> BufferExhaustedPolicy:
    """The policy of an instance whose policy the session may choose: the config's
    `buffer_exhausted_policy`, or `default` (the registration's) when it is unspecified.

    STALL_THEN_ABORT stalls, then raises (perfetto_smb's STALL) instead of aborting.
    """
    return _CONFIG_POLICIES.get(config.buffer_exhausted_policy, default)


class DataSourceInstanceHandle(Protocol):
    """One running instance of a data source, as the producer drives it."""

    def start(self) -> None:
        """The session started it."""

    def stop(self, done: Callable[[], None]) -> None:
        """The session stops it; `done()` once everything is written (maybe later)."""

    def flush(self) -> None:
        """Commit what was written so far."""

    def clear_incremental_state(self) -> None:
        """Forget interning and other incremental state."""


class DataSourceKind(Protocol):
    """A data source type the client offers (track_event, or a user's DataSource)."""

    name: str

    def descriptor(self) -> DataSourceDescriptor:
        """What is registered with the service."""

    def setup(
        self, producer: TracingProducer, instance_id: int, config: DataSourceConfig
    ) -> DataSourceInstanceHandle:
        """A new instance for a session."""


class ProducerHost(Protocol):
    """What the producer needs of its backend."""

    def arbiter(self) -> SharedMemoryArbiter | None:
        """The arbiter over the backend's shared memory buffer, once set up."""

    def on_producer_connected(self) -> None:
        """The connection to the service is up."""

    def post(self, fn: Callable[[], object]) -> None:
        """Runs `fn` where the producer endpoint may be called."""

    def on_producer_disconnected(self) -> None:
        """The service went away."""

    def data_sources(self) -> Sequence[DataSourceKind]:
        """Every registered data source kind."""


class TracingProducer:
    """Implements `perfetto_service.Producer` for one backend's connection.

    Its callbacks run on the backend's service thread (in-process: the service loop; system:
    the IPC thread).
    """

    def __init__(self, host: ProducerHost, name: str, *, adopts_startup: bool = False) -> None:
        self.host = host
        self.adopts_startup = adopts_startup
        """Whether sessions on this backend adopt startup tracing."""
        self.name = name
        self.endpoint: ProducerEndpoint | None = None
        self.instances: dict[int, DataSourceInstanceHandle] = {}
        self.connected = False
        self._lost = False
        self._registered: set[str] = set()

    def create_trace_writer(
        self, target_buffer: int, policy: BufferExhaustedPolicy = BufferExhaustedPolicy.DROP
    ) -> TraceWriter:
        """A TraceWriter into the session buffer `target_buffer` (raises if not set up)."""
        arbiter = self.host.arbiter()
        if arbiter is None:
            raise RuntimeError("tracing is not set up")
        return arbiter.create_trace_writer(target_buffer, policy)

    def register(self, kind: DataSourceKind) -> None:
        """Registers a data source kind with the service (once per connection)."""
        if self.endpoint is not None and self.connected and kind.name not in self._registered:
            self._registered.add(kind.name)
            self.endpoint.register_data_source(kind.descriptor())

    def update(self, kind: DataSourceKind) -> None:
        """Sends a new descriptor for a registered kind (e.g. more categories)."""
        if self.endpoint is not None and self.connected:
            self.endpoint.update_data_source(kind.descriptor())

    # perfetto_service.Producer ---------------------------------------------------------

    def on_connect(self) -> None:
        self.connected = True
        self.host.on_producer_connected()
        for kind in self.host.data_sources():
            self.register(kind)

    def on_disconnect(self) -> None:
        if self._lost:
            return
        self._lost = True
        self.connected = False
        instances, self.instances = self.instances, {}
        for instance in instances.values():
            try:
                instance.stop(lambda: None)
            except Exception:
                _log.exception("a data source failed to stop")
        self.host.on_producer_disconnected()

    def on_tracing_setup(self) -> None:
        pass

    def setup_data_source(self, instance_id: int, config: DataSourceConfig) -> None:
        if instance_id in self.instances:
            return
        for kind in self.host.data_sources():
            if kind.name == config.name:
                try:
                    self.instances[instance_id] = kind.setup(self, instance_id, config)
                except Exception:
                    _log.exception("data source %r failed to set up", config.name)
                return

    def start_data_source(self, instance_id: int, config: DataSourceConfig) -> None:
        self.setup_data_source(instance_id, config)
        instance = self.instances.get(instance_id)
        if instance is not None:
            try:
                instance.start()
            except Exception:
                _log.exception("data source %r failed to start", config.name)
        if self.endpoint is not None:
            self.endpoint.notify_data_source_started(instance_id)

    def stop_data_source(self, instance_id: int) -> None:
        instance = self.instances.pop(instance_id, None)
        endpoint = self.endpoint

        def notify() -> None:
            arbiter = self.host.arbiter()
            if arbiter is not None:
                arbiter.flush_pending_commit_data_requests()
            if endpoint is not None:
                endpoint.notify_data_source_stopped(instance_id)

        def done() -> None:
            self.host.post(notify)

        if instance is None:
            done()
            return
        try:
            instance.stop(done)
        except Exception:
            _log.exception("a data source failed to stop")
            done()

    def flush(self, request_id: int, instance_ids: Sequence[int], flags: int) -> None:
        for instance_id in instance_ids:
            instance = self.instances.get(instance_id)
            if instance is not None:
                try:
                    instance.flush()
                except Exception:
                    _log.exception("a data source failed to flush")
        arbiter = self.host.arbiter()
        if arbiter is not None:
            arbiter.notify_flush_complete(request_id)
        elif self.endpoint is not None:
            self.endpoint.notify_flush_complete(request_id)

    def clear_incremental_state(self, instance_ids: Sequence[int]) -> None:
        for instance_id in instance_ids:
            instance = self.instances.get(instance_id)
            if instance is not None:
                instance.clear_incremental_state()
