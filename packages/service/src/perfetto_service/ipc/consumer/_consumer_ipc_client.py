"""A consumer's connection to a tracing service over the consumer socket (upstream's ext tier).

`ConsumerIPCClient` implements `ConsumerEndpoint` by invoking ConsumerPort methods and calls
the application's `Consumer` with the answers, on the client's IPC thread: packets read back
are reassembled from their slices, and the EnableTracing reply (held by the service until
the session ends) becomes `on_tracing_disabled`.
"""

from __future__ import annotations

from collections.abc import Callable

from perfetto_protos.common.observable_events_pb2 import ObservableEvents
from perfetto_protos.common.trace_stats_pb2 import TraceStats
from perfetto_protos.common.tracing_service_capabilities_pb2 import TracingServiceCapabilities
from perfetto_protos.common.tracing_service_state_pb2 import TracingServiceState
from perfetto_protos.config.trace_config_pb2 import TraceConfig
from perfetto_protos.ipc import consumer_port_pb2 as pb
from perfetto_wire import Reply

from perfetto_service._interfaces import Consumer, SessionCloned
from perfetto_service.ipc._client_base import PortClient

__all__ = ["CONNECTION_LOST", "ENABLE_TRACING_REJECTED", "ConsumerIPCClient"]

ENABLE_TRACING_REJECTED = "the tracing service rejected EnableTracing"
CONNECTION_LOST = "the connection to the tracing service was lost"


class ConsumerIPCClient(PortClient):
    """A `ConsumerEndpoint` that talks to a tracing service over the consumer socket.

    Nothing is bound before `connect()`. Methods may be called from any thread; calls made before
    the connection is up are sent once it is. `Consumer` callbacks and the callbacks given to
    methods run on the IPC thread.
    """

    def __init__(self, socket_name: str, consumer: Consumer, *, retry: bool = False) -> None:
        self.consumer = consumer
        self._partial: list[bytes] = []
        self._disconnect_reported = False
        super().__init__(socket_name, "ConsumerPort", retry=retry, thread_name="perfetto-consumer")

    def disconnect(self) -> None:
        """Closes the connection; the consumer's `on_disconnect` runs once."""
        self.close()
        self._report_disconnect()

    def enable_tracing(self, config: TraceConfig, output_fd: int | None = None) -> None:
        """Sends EnableTracing (with `output_fd`, duplicated now, for write_into_file)."""
        request = pb.EnableTracingRequest(trace_config=config)
        self.invoke("EnableTracing", request, self._on_enable_tracing_reply, output_fd)

    def _on_enable_tracing_reply(self, reply: Reply) -> None:
        if reply.has_more:
            return
        if reply.success and reply.message is not None:
            self.consumer.on_tracing_disabled(reply.unwrap(pb.EnableTracingResponse).error)
        else:
            self.consumer.on_tracing_disabled(
                CONNECTION_LOST if self.connection_gone() else ENABLE_TRACING_REJECTED
            )

    def change_trace_config(self, config: TraceConfig) -> None:
        """Sends ChangeTraceConfig."""
        self.invoke(
            "ChangeTraceConfig", pb.ChangeTraceConfigRequest(trace_config=config), _ignore_reply
        )

    def start_tracing(self) -> None:
        """Sends StartTracing."""
        self.invoke("StartTracing", pb.StartTracingRequest(), _ignore_reply)

    def disable_tracing(self) -> None:
        """Sends DisableTracing."""
        self.invoke("DisableTracing", pb.DisableTracingRequest(), _ignore_reply)

    def flush(self, timeout_ms: int, callback: Callable[[bool], None], flags: int = 0) -> None:
        """Sends Flush; `callback(False)` if it timed out or failed."""

        def on_reply(reply: Reply) -> None:
            if not reply.has_more:
                callback(reply.success)

        self.invoke("Flush", pb.FlushRequest(timeout_ms=timeout_ms, flags=flags), on_reply)

    def read_buffers(self) -> None:
        """Sends ReadBuffers; packets reach `Consumer.on_trace_data` as they arrive."""
        self.invoke("ReadBuffers", pb.ReadBuffersRequest(), self._on_read_reply)

    def free_buffers(self) -> None:
        """Sends FreeBuffers."""
        self.invoke("FreeBuffers", pb.FreeBuffersRequest(), _ignore_reply)

    def detach(self, key: str) -> None:
        """Sends Detach; the answer goes to `Consumer.on_detach`."""

        def on_reply(reply: Reply) -> None:
            self.consumer.on_detach(reply.success)

        self.invoke("Detach", pb.DetachRequest(key=key), on_reply)

    def attach(self, key: str) -> None:
        """Sends Attach; the answer goes to `Consumer.on_attach`.

        Once attached, the end of the session is reported to `Consumer.on_tracing_disabled`.
        """

        def on_reply(reply: Reply) -> None:
            if reply.success and reply.message is not None:
                config = reply.unwrap(pb.AttachResponse).trace_config
                self.invoke(
                    "EnableTracing",
                    pb.EnableTracingRequest(attach_notification_only=True),
                    self._on_enable_tracing_reply,
                )
                self.consumer.on_attach(True, config)
            else:
                self.consumer.on_attach(False, TraceConfig())

        self.invoke("Attach", pb.AttachRequest(key=key), on_reply)

    def get_trace_stats(self) -> None:
        """Sends GetTraceStats; the answer goes to `Consumer.on_trace_stats`."""

        def on_reply(reply: Reply) -> None:
            if reply.success and reply.message is not None:
                stats = reply.unwrap(pb.GetTraceStatsResponse).trace_stats
                self.consumer.on_trace_stats(True, stats)
            else:
                self.consumer.on_trace_stats(False, TraceStats())

        self.invoke("GetTraceStats", pb.GetTraceStatsRequest(), on_reply)

    def observe_events(self, events_mask: int) -> None:
        """Subscribes to ObservableEvents types; events go to `Consumer.on_observable_events`."""
        # Upstream sends every set bit of the low 32; protobuf refuses values it has no name for.
        known = ObservableEvents.Type.values()
        types = [bit for bit in _bits(events_mask & 0xFFFFFFFF) if bit in known]

        def on_reply(reply: Reply) -> None:
            if not reply.success or reply.message is None:
                return
            response = reply.unwrap(pb.ObserveEventsResponse)
            if response.HasField("events"):
                self.consumer.on_observable_events(response.events)

        request = pb.ObserveEventsRequest(events_to_observe=types)  # type: ignore[arg-type]
        self.invoke("ObserveEvents", request, on_reply)

    def query_service_state(
        self, sessions_only: bool, callback: Callable[[bool, TracingServiceState], None]
    ) -> None:
        """Sends QueryServiceState; `callback` gets the state merged from every reply."""
        state = TracingServiceState()

        def on_reply(reply: Reply) -> None:
            if reply.success and reply.message is not None:
                state.MergeFrom(reply.unwrap(pb.QueryServiceStateResponse).service_state)
            if not reply.has_more:
                callback(reply.success, state)

        request = pb.QueryServiceStateRequest(sessions_only=sessions_only)
        self.invoke("QueryServiceState", request, on_reply)

    def query_capabilities(self, callback: Callable[[TracingServiceCapabilities], None]) -> None:
        """Sends QueryCapabilities; `callback` gets them (empty if the call failed)."""

        def on_reply(reply: Reply) -> None:
            if reply.success and reply.message is not None:
                callback(reply.unwrap(pb.QueryCapabilitiesResponse).capabilities)
            else:
                callback(TracingServiceCapabilities())

        self.invoke("QueryCapabilities", pb.QueryCapabilitiesRequest(), on_reply)

    def clone_session(
        self,
        callback: Callable[[SessionCloned], None],
        *,
        session_id: int = 0,
        unique_session_name: str = "",
        output_fd: int | None = None,
    ) -> None:
        """Sends CloneSession (by id, else by unique name); `callback` gets the answer.

        On success this consumer is bound to the clone: `read_buffers` reads it back.
        """

        def on_reply(reply: Reply) -> None:
            if reply.has_more:
                return
            if reply.success and reply.message is not None:
                answer = reply.unwrap(pb.CloneSessionResponse)
                callback(
                    SessionCloned(
                        answer.success,
                        answer.error,
                        answer.uuid_msb,
                        answer.uuid_lsb,
                        answer.was_write_into_file,
                    )
                )
            else:
                callback(SessionCloned(False, "the tracing service did not answer CloneSession"))

        if session_id:
            request = pb.CloneSessionRequest(session_id=session_id)
        else:
            request = pb.CloneSessionRequest(unique_session_name=unique_session_name)
        self.invoke("CloneSession", request, on_reply, output_fd)

    # On the IPC thread.

    def _on_read_reply(self, reply: Reply) -> None:
        if not reply.success or reply.message is None:
            # As upstream's: a failed read is not the end of the trace. The connection lost
            # mid-read (e.g. the service cut off a consumer that stopped reading) is told by
            # on_disconnect; a read superseded by a newer ReadBuffers ends with that one.
            self._partial = []
            return
        packets: list[list[bytes]] = []
        partial = self._partial
        for piece in reply.unwrap(pb.ReadBuffersResponse).slices:
            partial.append(piece.data)
            if piece.last_slice_for_packet:
                packets.append(partial)
                partial = []
        self._partial = partial
        if not reply.has_more:
            self._partial = []
        self.consumer.on_trace_data(packets, reply.has_more)

    def _on_ready(self) -> None:
        self.consumer.on_connect()

    def _on_lost(self) -> None:
        self._report_disconnect()

    def _report_disconnect(self) -> None:
        if self._disconnect_reported:
            return
        self._disconnect_reported = True
        self.consumer.on_disconnect()


def _ignore_reply(_reply: Reply) -> None:
    """Upstream's consumer asks for a reply to every call, even where it has no use for it."""


def _bits(mask: int) -> list[int]:
    return [1 << bit for bit in range(mask.bit_length()) if mask >> bit & 1]
