"""The service's side of one connected consumer."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from perfetto_protos.common.observable_events_pb2 import ObservableEvents
from perfetto_protos.common.trace_stats_pb2 import TraceStats
from perfetto_protos.common.tracing_service_capabilities_pb2 import TracingServiceCapabilities
from perfetto_protos.common.tracing_service_state_pb2 import TracingServiceState
from perfetto_protos.config.trace_config_pb2 import TraceConfig

from perfetto_service._interfaces import Consumer, SessionCloned, TaskRunner
from perfetto_service.core._clone import clone_session
from perfetto_service.core._session import DataSourceInstance, InstanceState, TriggerInfo

if TYPE_CHECKING:
    from perfetto_service.core._tracing_service import TracingService

_TYPE_DATA_SOURCES_INSTANCES = ObservableEvents.TYPE_DATA_SOURCES_INSTANCES
_TYPE_ALL_DATA_SOURCES_STARTED = ObservableEvents.TYPE_ALL_DATA_SOURCES_STARTED
_TYPE_CLONE_TRIGGER_HIT = ObservableEvents.TYPE_CLONE_TRIGGER_HIT


class ConsumerEndpointImpl:
    """What one consumer calls on the service (a `ConsumerEndpoint`), and its state there.

    The end of a session and observable events are posted on the task runner (and dropped
    once the consumer disconnected); detach, attach and stats are answered before the call
    returns, so that calls pipelined by an IPC client get their answers in order.
    """

    def __init__(
        self, service: TracingService, consumer: Consumer, uid: int, task_runner: TaskRunner
    ) -> None:
        self._service = service
        self.consumer = consumer
        self.uid = uid
        self._task_runner = task_runner
        self.tracing_session_id = 0
        self.observable_events_mask = 0
        self._pending_events: ObservableEvents | None = None
        self.connected = True

    def _post(self, task: Callable[[], None]) -> None:
        def run() -> None:
            if self.connected:
                task()

        self._task_runner.post_task(run)

    # Service side ------------------------------------------------------------------------

    def notify_on_tracing_disabled(self, error: str) -> None:
        """Tells the consumer its session ended (EnableTracing's reply)."""
        self._post(lambda: self.consumer.on_tracing_disabled(error))

    def on_data_source_instance_state_change(
        self, producer_name: str, instance: DataSourceInstance
    ) -> None:
        """Queues a DATA_SOURCES_INSTANCES event, if observed."""
        if not self.observable_events_mask & _TYPE_DATA_SOURCES_INSTANCES:
            return
        if instance.state not in (
            InstanceState.CONFIGURED,
            InstanceState.STARTED,
            InstanceState.STOPPED,
        ):
            return
        change = self._add_observable_events().instance_state_changes.add()
        change.producer_name = producer_name
        change.data_source_name = instance.data_source_name
        change.state = (
            ObservableEvents.DATA_SOURCE_INSTANCE_STATE_STARTED
            if instance.state is InstanceState.STARTED
            else ObservableEvents.DATA_SOURCE_INSTANCE_STATE_STOPPED
        )

    def on_all_data_sources_started(self) -> None:
        """Queues an ALL_DATA_SOURCES_STARTED event, if observed."""
        if self.observable_events_mask & _TYPE_ALL_DATA_SOURCES_STARTED:
            self._add_observable_events().all_data_sources_started = True

    def on_clone_trigger_hit(self, session_id: int, trigger: TriggerInfo) -> None:
        """Queues a CLONE_TRIGGER_HIT event (a CLONE_SNAPSHOT trigger fired), if observed."""
        if not self.connected or not self.observable_events_mask & _TYPE_CLONE_TRIGGER_HIT:
            return
        hit = self._add_observable_events().clone_trigger_hit
        hit.tracing_session_id = session_id
        hit.trigger_name = trigger.trigger_name
        hit.producer_name = trigger.producer_name
        hit.producer_uid = trigger.producer_uid
        hit.boot_time_ns = trigger.boot_time_ns
        hit.trigger_delay_ms = trigger.stop_delay_ms

    def _add_observable_events(self) -> ObservableEvents:
        if self._pending_events is None:
            self._pending_events = ObservableEvents()
            self._post(self._deliver_observable_events)
        return self._pending_events

    def _deliver_observable_events(self) -> None:
        events = self._pending_events
        self._pending_events = None
        if events is not None:
            self.consumer.on_observable_events(events)

    # ConsumerEndpoint ---------------------------------------------------------------------

    def disconnect(self) -> None:
        """Leaves the service; an attached session ends and its buffers are freed."""
        if self.connected:
            self._service.disconnect_consumer(self)
            self.connected = False
            self.consumer.on_disconnect()

    def enable_tracing(self, config: TraceConfig, output_fd: int | None = None) -> None:
        """Starts a session (unless deferred_start); `output_fd` gets a write_into_file trace.

        The service owns `output_fd` from here on.
        """
        error = self._service.enable_tracing(self, config, output_fd)
        if error:
            self.notify_on_tracing_disabled(error)

    def change_trace_config(self, config: TraceConfig) -> None:
        """Updates the data source filters of the running session."""
        if self.tracing_session_id:
            self._service.change_trace_config(self, config)

    def start_tracing(self) -> None:
        """Starts a session enabled with deferred_start."""
        if self.tracing_session_id:
            self._service.start_tracing(self.tracing_session_id)

    def disable_tracing(self) -> None:
        """Stops the session; `Consumer.on_tracing_disabled` follows."""
        if self.tracing_session_id:
            self._service.disable_tracing(self.tracing_session_id)

    def flush(self, timeout_ms: int, callback: Callable[[bool], None], flags: int = 0) -> None:
        """Asks every data source to commit its data; `callback(False)` on timeout."""
        if self.tracing_session_id:
            self._service.flush(self.tracing_session_id, timeout_ms, callback, flags)
        else:
            callback(False)

    def read_buffers(self) -> None:
        """Streams the buffers' contents to `Consumer.on_trace_data`."""
        if not self.tracing_session_id or not self._service.read_buffers_into_consumer(
            self.tracing_session_id, self
        ):
            self.consumer.on_trace_data([], False)

    def free_buffers(self) -> None:
        """Ends the session and releases its buffers."""
        if self.tracing_session_id:
            self._service.free_buffers(self.tracing_session_id)
            self.tracing_session_id = 0

    def detach(self, key: str) -> None:
        """Leaves the session running under `key` after this consumer goes away."""
        self.consumer.on_detach(self._service.detach_consumer(self, key))

    def attach(self, key: str) -> None:
        """Takes back a session detached under `key`."""
        success = self._service.attach_consumer(self, key)
        session = self._service.session(self.tracing_session_id) if success else None
        if session is None:
            self.consumer.on_attach(False, TraceConfig())
        else:
            self.consumer.on_attach(True, session.config)

    def get_trace_stats(self) -> None:
        """Asks for `Consumer.on_trace_stats`."""
        session = self._service.session(self.tracing_session_id)
        if session is None:
            self.consumer.on_trace_stats(False, TraceStats())
        else:
            self.consumer.on_trace_stats(True, self._service.trace_stats(session))

    def observe_events(self, events_mask: int) -> None:
        """Subscribes to ObservableEvents types (a bit mask; 0 stops observing)."""
        self.observable_events_mask = events_mask
        session = self._service.session(self.tracing_session_id)
        if session is None:
            return
        if events_mask & _TYPE_DATA_SOURCES_INSTANCES:
            for instance in session.data_source_instances:
                producer = self._service.producer(instance.producer_id)
                if producer is not None:
                    self.on_data_source_instance_state_change(producer.name, instance)
        if events_mask & _TYPE_ALL_DATA_SOURCES_STARTED:
            self._service.maybe_notify_all_data_sources_started(session)

    def query_service_state(
        self, sessions_only: bool, callback: Callable[[bool, TracingServiceState], None]
    ) -> None:
        """Describes the producers, data sources and sessions the service knows."""
        callback(True, self._service.service_state(self.uid, sessions_only=sessions_only))

    def query_capabilities(self, callback: Callable[[TracingServiceCapabilities], None]) -> None:
        """Describes what this service supports."""
        callback(self._service.capabilities())

    def clone_session(
        self,
        callback: Callable[[SessionCloned], None],
        *,
        session_id: int = 0,
        unique_session_name: str = "",
    ) -> None:
        """Snapshots a running session into a read-only one that this consumer reads back."""
        clone_session(
            self._service,
            self,
            session_id=session_id,
            unique_name=unique_session_name,
            callback=callback,
        )
