"""The internal producer/consumer API: what the service offers and what it calls back.

These mirror upstream's `Producer`, `Consumer`, `ProducerEndpoint`, `ConsumerEndpoint` and
`TracingService` (include/perfetto/ext/tracing/core). The same interfaces serve an in-process
producer or consumer and the IPC proxies: on the service side a port adapter implements
`Producer`/`Consumer` by sending commands over the socket; on the client side a proxy implements
`ProducerEndpoint`/`ConsumerEndpoint` by invoking the remote methods.

Every call into an endpoint, and every callback from it, happens on the service's task runner
thread (the asyncio loop that owns all service state).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from perfetto_protos.common.commit_data_request_pb2 import CommitDataRequest
    from perfetto_protos.common.data_source_descriptor_pb2 import DataSourceDescriptor
    from perfetto_protos.common.observable_events_pb2 import ObservableEvents
    from perfetto_protos.common.trace_stats_pb2 import TraceStats
    from perfetto_protos.common.tracing_service_capabilities_pb2 import TracingServiceCapabilities
    from perfetto_protos.common.tracing_service_state_pb2 import TracingServiceState
    from perfetto_protos.config.data_source_config_pb2 import DataSourceConfig
    from perfetto_protos.config.trace_config_pb2 import TraceConfig
    from perfetto_smb import SharedMemory

TracePacketSlices = Sequence[bytes | memoryview]
"""One trace packet as the service returns it: its slices, in order (no preamble)."""


class TaskRunner(Protocol):
    """Runs callables on the one thread that owns the service's state."""

    def post_task(self, task: Callable[[], None]) -> None:
        """Runs `task` soon, after the tasks already posted."""

    def post_delayed_task(self, task: Callable[[], None], delay_ms: int) -> None:
        """Runs `task` once `delay_ms` milliseconds have passed."""


class AsyncioTaskRunner:
    """A `TaskRunner` over an asyncio event loop (the loop the IPC host runs on)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop

    def post_task(self, task: Callable[[], None]) -> None:
        """Runs `task` on the loop soon; safe to call from any thread.

        Posted from a task running on the loop it is queued without waking the loop (which
        runs what is queued before it waits again); from elsewhere the loop is woken.
        """
        try:
            on_loop = asyncio.get_running_loop() is self.loop
        except RuntimeError:  # no loop runs in this thread
            on_loop = False
        if on_loop:
            self.loop.call_soon(task)
        else:
            self.loop.call_soon_threadsafe(task)

    def post_delayed_task(self, task: Callable[[], None], delay_ms: int) -> None:
        """Runs `task` on the loop after `delay_ms`; call it from the loop's thread."""
        self.loop.call_later(max(delay_ms, 0) / 1000.0, task)


@dataclass(frozen=True)
class SessionCloned:
    """The answer to `ConsumerEndpoint.clone_session` (upstream's OnSessionClonedArgs)."""

    success: bool
    error: str = ""
    uuid_msb: int = 0
    uuid_lsb: int = 0
    was_write_into_file: bool = False


@dataclass(frozen=True)
class ClientIdentity:
    """Who a producer or consumer is: peer credentials taken from its socket (or this process)."""

    uid: int
    pid: int = -1
    machine_id: int = 0
    machine_name: str = ""  # a remote producer's machine, as its relay names it


class Producer(Protocol):
    """What the service calls on a producer (a process that writes trace data).

    Subclass it and override what you need: every callback does nothing by default, and a
    producer that keeps the default `flush` has its flushes acknowledged at once. (A class
    that only has the same methods also fits, but gets no defaults.)
    """

    def on_connect(self) -> None:
        """The connection to the service is established."""
        return

    def on_disconnect(self) -> None:
        """The service went away or refused the producer; no more calls follow."""
        return

    def on_tracing_setup(self) -> None:
        """The shared memory buffer exists: `ProducerEndpoint.shared_memory()` returns it."""
        return

    def setup_data_source(self, instance_id: int, config: DataSourceConfig) -> None:
        """Prepares a data source instance before it is started."""
        return

    def start_data_source(self, instance_id: int, config: DataSourceConfig) -> None:
        """Starts writing data for a data source instance."""
        return

    def stop_data_source(self, instance_id: int) -> None:
        """Stops a data source instance; ack with notify_data_source_stopped if it asked to."""
        return

    def flush(self, request_id: int, instance_ids: Sequence[int], flags: int) -> None:
        """Commits everything written so far, then acks with `notify_flush_complete`.

        The default has nothing of its own to commit: whoever delivers the flush acks it.
        """
        return

    def clear_incremental_state(self, instance_ids: Sequence[int]) -> None:
        """Forgets interning and other incremental state of these instances."""
        return


def acks_flush_itself(producer: Producer) -> bool:
    """False when `producer` keeps `Producer.flush`'s default (so its flushes are acked for it)."""
    return getattr(type(producer), "flush", None) is not Producer.flush


class ProducerEndpoint(Protocol):
    """What a producer calls on the service."""

    def disconnect(self) -> None:
        """Leaves the service; what was committed stays in the trace."""

    def register_data_source(self, descriptor: DataSourceDescriptor) -> None:
        """Advertises a data source that sessions can enable by name."""

    def update_data_source(self, descriptor: DataSourceDescriptor) -> None:
        """Replaces the descriptor of a data source registered earlier (same id and name)."""

    def unregister_data_source(self, name: str) -> None:
        """Withdraws a data source; its running instances are stopped."""

    def register_trace_writer(self, writer_id: int, target_buffer: int) -> None:
        """Tells the service which buffer a writer commits to (needed for SMB scraping)."""

    def unregister_trace_writer(self, writer_id: int) -> None:
        """Forgets a writer registered with `register_trace_writer`."""

    def commit_data(
        self, request: CommitDataRequest, callback: Callable[[], None] | None = None
    ) -> None:
        """Moves completed chunks out of shared memory, applies patches, acks a flush."""

    def shared_memory(self) -> SharedMemory | None:
        """The producer's shared memory buffer, once tracing was set up."""

    def shared_buffer_page_size_kb(self) -> int:
        """The page size of the shared memory buffer, in KiB."""

    def notify_flush_complete(self, request_id: int) -> None:
        """Acks a flush request (the same as CommitData with flush_request_id)."""

    def notify_data_source_started(self, instance_id: int) -> None:
        """Acks `start_data_source` for a data source with will_notify_on_start."""

    def notify_data_source_stopped(self, instance_id: int) -> None:
        """Acks `stop_data_source` for a data source with will_notify_on_stop."""

    def activate_triggers(self, names: Sequence[str]) -> None:
        """Fires triggers that sessions may be waiting for."""

    def sync(self, callback: Callable[[], None]) -> None:
        """Calls `callback` once every call made before it was processed."""


class Consumer(Protocol):
    """What the service calls on a consumer (a process that controls sessions and reads traces).

    Subclass it and override what you need: every callback does nothing by default.
    """

    def on_connect(self) -> None:
        """The connection to the service is established."""
        return

    def on_disconnect(self) -> None:
        """The service went away; no more calls follow."""
        return

    def on_tracing_disabled(self, error: str) -> None:
        """The session ended; `error` is empty unless it ended because of one."""
        return

    def on_trace_data(self, packets: Sequence[TracePacketSlices], has_more: bool) -> None:
        """A batch of trace packets read from the buffers; `has_more` false on the last batch.

        A consumer may also offer `when_ready_for_trace_data(resume: Callable[[], None])`,
        which calls `resume` once it can take the next batch; the service reads the next one
        only then, so that ReadBuffers goes at the pace of a consumer on a socket. Without it
        the next batch follows at once. One that sends the packets on as ReadBuffers replies
        may offer `on_trace_replies(replies: list[bytes], has_more: bool)` instead, which gets
        `read_buffers_replies` of the batch, written without an object per packet.
        """
        return

    def on_detach(self, success: bool) -> None:
        """The answer to `detach`."""
        return

    def on_attach(self, success: bool, config: TraceConfig) -> None:
        """The answer to `attach`, with the config of the session re-attached to."""
        return

    def on_trace_stats(self, success: bool, stats: TraceStats) -> None:
        """The answer to `get_trace_stats`."""
        return

    def on_observable_events(self, events: ObservableEvents) -> None:
        """Events the consumer asked for with `observe_events`."""
        return


class ConsumerEndpoint(Protocol):
    """What a consumer calls on the service."""

    def enable_tracing(self, config: TraceConfig, output_fd: int | None = None) -> None:
        """Starts a session (unless deferred_start); `output_fd` gets a write_into_file trace."""

    def change_trace_config(self, config: TraceConfig) -> None:
        """Updates the data source filters of the running session."""

    def start_tracing(self) -> None:
        """Starts a session enabled with deferred_start."""

    def disable_tracing(self) -> None:
        """Stops the session; `Consumer.on_tracing_disabled` follows."""

    def flush(self, timeout_ms: int, callback: Callable[[bool], None], flags: int = 0) -> None:
        """Asks every data source to commit its data; `callback(False)` on timeout."""

    def read_buffers(self) -> None:
        """Streams the buffers' contents to `Consumer.on_trace_data`."""

    def free_buffers(self) -> None:
        """Ends the session and releases its buffers."""

    def detach(self, key: str) -> None:
        """Leaves the session running under `key` after this consumer goes away."""

    def attach(self, key: str) -> None:
        """Takes back a session detached under `key`."""

    def get_trace_stats(self) -> None:
        """Asks for `Consumer.on_trace_stats`."""

    def observe_events(self, events_mask: int) -> None:
        """Subscribes to ObservableEvents types (a bit mask; 0 stops observing)."""

    def query_service_state(
        self, sessions_only: bool, callback: Callable[[bool, TracingServiceState], None]
    ) -> None:
        """Describes the producers, data sources and sessions the service knows."""

    def query_capabilities(self, callback: Callable[[TracingServiceCapabilities], None]) -> None:
        """Describes what this service supports."""

    def clone_session(
        self,
        callback: Callable[[SessionCloned], None],
        *,
        session_id: int = 0,
        unique_session_name: str = "",
    ) -> None:
        """Snapshots a running session (by id or unique name) into a read-only session that
        this consumer then reads back; the source session keeps tracing."""
