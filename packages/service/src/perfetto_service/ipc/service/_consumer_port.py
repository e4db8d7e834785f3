"""The ConsumerPort IPC service: maps a consumer socket's RPCs onto the tracing service.

One `RemoteConsumer` per connection, created at its first call, implements `Consumer` for the
service by answering the calls it holds: EnableTracing (answered when the session ends),
ReadBuffers (streamed, sliced to fit IPC frames), Detach, Attach, GetTraceStats and the
ObserveEvents stream.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from google.protobuf.message import Message
from perfetto_protos.common.observable_events_pb2 import ObservableEvents
from perfetto_protos.common.trace_stats_pb2 import TraceStats
from perfetto_protos.common.tracing_service_capabilities_pb2 import TracingServiceCapabilities
from perfetto_protos.common.tracing_service_state_pb2 import TracingServiceState
from perfetto_protos.config.trace_config_pb2 import TraceConfig
from perfetto_protos.ipc import consumer_port_pb2 as pb
from perfetto_protos.tags.fields import QueryServiceStateResponse_service_state_TAG
from perfetto_wire import ClientInfo, Deferred, Host, ServiceDescriptor, WireError, serialize
from protozero import encode_varint, write_redundant_varint

from perfetto_service._interfaces import (
    Consumer,
    ConsumerEndpoint,
    SessionCloned,
    TracePacketSlices,
)
from perfetto_service.core._read_slicer import IPC_BUFFER_SIZE, read_buffers_replies

__all__ = [
    "QUERY_SERVICE_STATE_CHUNK_SIZE",
    "ConsumerConnector",
    "ConsumerPort",
    "ConsumerSession",
    "RemoteConsumer",
    "split_service_state",
]

_log = logging.getLogger("perfetto_service")

QUERY_SERVICE_STATE_CHUNK_SIZE = IPC_BUFFER_SIZE - 128
"""A QueryServiceState reply stays below this many bytes unless one data source is bigger."""

_SERVICE_STATE_TAG = encode_varint(QueryServiceStateResponse_service_state_TAG)

_READ_REPLY_BUDGET = IPC_BUFFER_SIZE - 64
"""Largest serialized ReadBuffersResponse sent, leaving room for the frame around it."""

SAVE_FOR_BUGREPORT_UNSUPPORTED = "SaveTraceForBugreport is not supported by this service"


class ConsumerSession(ConsumerEndpoint, Protocol):
    """A consumer's endpoint as the service hands it out: it can also be disconnected."""

    def disconnect(self) -> None:
        """The consumer went away: its sessions end unless detached."""


class ConsumerConnector(Protocol):
    """The part of the tracing service the consumer port needs."""

    def connect_consumer(self, consumer: Consumer, uid: int) -> ConsumerSession:
        """Connects a consumer."""


def split_service_state(state: TracingServiceState) -> list[bytes]:
    """`state` serialized in pieces that each parse alone and concatenate to the whole.

    Everything but the data sources goes first; data sources follow one by one, a new piece
    starting whenever the current one would reach `QUERY_SERVICE_STATE_CHUNK_SIZE`.
    """
    head = TracingServiceState()
    head.CopyFrom(state)
    del head.data_sources[:]
    pieces: list[bytes] = []
    current = serialize(head)
    for data_source in state.data_sources:
        one = TracingServiceState()
        one.data_sources.add().CopyFrom(data_source)
        encoded = serialize(one)
        if len(current) + len(encoded) < QUERY_SERVICE_STATE_CHUNK_SIZE:
            current += encoded
        else:
            pieces.append(current)
            current = encoded
    pieces.append(current)
    return pieces


class RemoteConsumer:
    """The service's view of one consumer on the other end of a socket."""

    def __init__(self, client: ClientInfo) -> None:
        self.client = client
        self.endpoint: ConsumerEndpoint | None = None
        self.enable_tracing: Deferred | None = None
        self.read_buffers: Deferred | None = None
        self.detach_call: Deferred | None = None
        self.attach_call: Deferred | None = None
        self.trace_stats_call: Deferred | None = None
        self.observe_events: Deferred | None = None
        self._pending_reply = bytearray()

    def on_connect(self) -> None:
        """Nothing to do: the consumer is already talking."""

    def on_disconnect(self) -> None:
        """Nothing to do: the socket's end is reported by the IPC host."""

    def on_tracing_disabled(self, error: str) -> None:
        """Answers the held EnableTracing call: disabled, with the error if any."""
        deferred, self.enable_tracing = self.enable_tracing, None
        if deferred is None or deferred.done:
            return
        reply = pb.EnableTracingResponse(disabled=True)
        if error:
            reply.error = error
        _send(deferred, reply)

    def on_trace_data(self, packets: Sequence[TracePacketSlices], has_more: bool) -> None:
        """Streams packets to the pending ReadBuffers call, sliced to fit IPC frames."""
        self.on_trace_replies(read_buffers_replies(packets), has_more)

    def on_trace_replies(self, replies: list[bytes], has_more: bool) -> None:
        """Streams serialized ReadBuffersResponse messages to the pending ReadBuffers call.

        The service reads in small parts; replies are packed together (two
        ReadBuffersResponse messages concatenated are one holding both slice lists) so that
        frames go out nearly full, and the last part is sent at once.
        """
        deferred = self.read_buffers
        if deferred is None or deferred.done:
            return
        pending = self._pending_reply
        for reply in replies:
            if pending and len(pending) + len(reply) > _READ_REPLY_BUDGET:
                if not _send_serialized(deferred, bytes(pending), has_more=True):
                    self._abandon_read()
                    return
                pending = bytearray()
            pending += reply
        if has_more:
            self._pending_reply = pending
            return
        self._pending_reply = bytearray()
        self.read_buffers = None
        _send_serialized(deferred, bytes(pending))

    def when_ready_for_trace_data(self, resume: Callable[[], None]) -> None:
        """Calls `resume` once the consumer's socket has taken most of what was sent."""
        deferred = self.read_buffers
        if deferred is not None and not deferred.done:
            deferred.when_drained(resume)

    def start_read(self, deferred: Deferred) -> None:
        """Adopts a ReadBuffers call (a previous one still streaming is failed)."""
        _replace_call(self.read_buffers)
        self._pending_reply = bytearray()
        self.read_buffers = deferred

    def _abandon_read(self) -> None:
        self._pending_reply = bytearray()
        self.read_buffers = None

    def on_detach(self, success: bool) -> None:
        """Answers Detach."""
        deferred, self.detach_call = self.detach_call, None
        _answer(deferred, pb.DetachResponse() if success else None)

    def on_attach(self, success: bool, config: TraceConfig) -> None:
        """Answers Attach with the session's config."""
        deferred, self.attach_call = self.attach_call, None
        _answer(deferred, pb.AttachResponse(trace_config=config) if success else None)

    def on_trace_stats(self, success: bool, stats: TraceStats) -> None:
        """Answers GetTraceStats."""
        deferred, self.trace_stats_call = self.trace_stats_call, None
        _answer(deferred, pb.GetTraceStatsResponse(trace_stats=stats) if success else None)

    def on_observable_events(self, events: ObservableEvents) -> None:
        """Sends events on the ObserveEvents stream."""
        deferred = self.observe_events
        if deferred is not None and not deferred.done:
            _send(deferred, pb.ObserveEventsResponse(events=events), has_more=True)

    def close_observe_events(self) -> None:
        """Ends the ObserveEvents stream, if one is open."""
        deferred, self.observe_events = self.observe_events, None
        if deferred is not None and not deferred.done:
            _send(deferred, pb.ObserveEventsResponse())


def _send(deferred: Deferred, reply: Message, *, has_more: bool = False) -> bool:
    """Sends one reply; False if it could not go out (the call is then failed)."""
    try:
        deferred.resolve(reply, has_more=has_more)
    except WireError as exc:
        _log.warning("cannot answer %s: %s", deferred.method.name, exc)
        return False
    return True


def _send_serialized(deferred: Deferred, reply: bytes, *, has_more: bool = False) -> bool:
    """Sends one reply serialized by the service; False if it could not go out."""
    try:
        deferred.resolve_serialized(reply, has_more=has_more)
    except WireError as exc:
        _log.warning("cannot answer %s: %s", deferred.method.name, exc)
        return False
    return True


def _answer(deferred: Deferred | None, reply: Message | None) -> None:
    if deferred is None or deferred.done:
        return
    if reply is None:
        deferred.reject()
    else:
        _send(deferred, reply)


def _replace_call(held: Deferred | None) -> None:
    """Rejects a call superseded by a new one of the same kind."""
    if held is not None and not held.done:
        held.reject()


class ConsumerPort:
    """The handlers of the ConsumerPort service, one `RemoteConsumer` per connection."""

    descriptor = ServiceDescriptor.for_service("ConsumerPort")

    def __init__(self, service: ConsumerConnector) -> None:
        self._service = service
        self._consumers: dict[int, tuple[RemoteConsumer, ConsumerSession]] = {}

    def expose_on(self, host: Host) -> None:
        """Exposes the service on `host` (call `on_client_disconnected` from the host's hook)."""
        host.expose_service(self.descriptor, self._handlers())

    @property
    def consumers(self) -> list[RemoteConsumer]:
        """The consumers that have made at least one call."""
        return [consumer for consumer, _ in self._consumers.values()]

    def on_client_disconnected(self, client: ClientInfo) -> None:
        """Forgets a connection's consumer and disconnects it from the service."""
        entry = self._consumers.pop(client.client_id, None)
        if entry is not None:
            entry[0].endpoint = None
            entry[1].disconnect()

    def _consumer(self, client: ClientInfo) -> tuple[RemoteConsumer, ConsumerSession]:
        entry = self._consumers.get(client.client_id)
        if entry is None:
            consumer = RemoteConsumer(client)
            endpoint = self._service.connect_consumer(consumer, client.uid)
            consumer.endpoint = endpoint
            entry = (consumer, endpoint)
            self._consumers[client.client_id] = entry
        return entry

    def _handlers(self) -> dict[str, Callable[[Message, Deferred], Message | None]]:
        def wrap(
            call: Callable[[RemoteConsumer, ConsumerEndpoint, Any, Deferred], Message | None],
        ) -> Callable[[Message, Deferred], Message | None]:
            def handler(request: Message, deferred: Deferred) -> Message | None:
                consumer, endpoint = self._consumer(deferred.client)
                return call(consumer, endpoint, request, deferred)

            return handler

        return {
            "EnableTracing": wrap(_enable_tracing),
            "DisableTracing": wrap(_disable_tracing),
            "ReadBuffers": wrap(_read_buffers),
            "FreeBuffers": wrap(_free_buffers),
            "Flush": wrap(_flush),
            "StartTracing": wrap(_start_tracing),
            "ChangeTraceConfig": wrap(_change_trace_config),
            "Detach": wrap(_detach),
            "Attach": wrap(_attach),
            "GetTraceStats": wrap(_get_trace_stats),
            "ObserveEvents": wrap(_observe_events),
            "QueryServiceState": wrap(_query_service_state),
            "QueryCapabilities": wrap(_query_capabilities),
            "SaveTraceForBugreport": wrap(_save_trace_for_bugreport),
            "CloneSession": wrap(_clone_session),
        }


def _enable_tracing(
    consumer: RemoteConsumer,
    endpoint: ConsumerEndpoint,
    request: pb.EnableTracingRequest,
    deferred: Deferred,
) -> None:
    if request.attach_notification_only:
        _replace_call(consumer.enable_tracing)
        consumer.enable_tracing = deferred
        return
    config = request.trace_config
    fd: int | None = None
    if config.write_into_file and not config.output_path:
        fd = deferred.take_received_fd()
    _replace_call(consumer.enable_tracing)
    consumer.enable_tracing = deferred
    endpoint.enable_tracing(config, fd)


def _disable_tracing(
    _consumer: RemoteConsumer,
    endpoint: ConsumerEndpoint,
    _request: pb.DisableTracingRequest,
    _deferred: Deferred,
) -> Message:
    endpoint.disable_tracing()
    return pb.DisableTracingResponse()


def _read_buffers(
    consumer: RemoteConsumer,
    endpoint: ConsumerEndpoint,
    _request: pb.ReadBuffersRequest,
    deferred: Deferred,
) -> None:
    consumer.start_read(deferred)
    endpoint.read_buffers()


def _free_buffers(
    _consumer: RemoteConsumer,
    endpoint: ConsumerEndpoint,
    _request: pb.FreeBuffersRequest,
    _deferred: Deferred,
) -> Message:
    endpoint.free_buffers()
    return pb.FreeBuffersResponse()


def _flush(
    _consumer: RemoteConsumer,
    endpoint: ConsumerEndpoint,
    request: pb.FlushRequest,
    deferred: Deferred,
) -> None:
    def on_flushed(success: bool) -> None:
        _answer(deferred, pb.FlushResponse() if success else None)

    endpoint.flush(request.timeout_ms, on_flushed, request.flags)


def _start_tracing(
    _consumer: RemoteConsumer,
    endpoint: ConsumerEndpoint,
    _request: pb.StartTracingRequest,
    _deferred: Deferred,
) -> Message:
    endpoint.start_tracing()
    return pb.StartTracingResponse()


def _change_trace_config(
    _consumer: RemoteConsumer,
    endpoint: ConsumerEndpoint,
    request: pb.ChangeTraceConfigRequest,
    _deferred: Deferred,
) -> Message:
    endpoint.change_trace_config(request.trace_config)
    return pb.ChangeTraceConfigResponse()


def _detach(
    consumer: RemoteConsumer,
    endpoint: ConsumerEndpoint,
    request: pb.DetachRequest,
    deferred: Deferred,
) -> None:
    _replace_call(consumer.detach_call)
    consumer.detach_call = deferred
    endpoint.detach(request.key)


def _attach(
    consumer: RemoteConsumer,
    endpoint: ConsumerEndpoint,
    request: pb.AttachRequest,
    deferred: Deferred,
) -> None:
    _replace_call(consumer.attach_call)
    consumer.attach_call = deferred
    endpoint.attach(request.key)


def _get_trace_stats(
    consumer: RemoteConsumer,
    endpoint: ConsumerEndpoint,
    _request: pb.GetTraceStatsRequest,
    deferred: Deferred,
) -> None:
    _replace_call(consumer.trace_stats_call)
    consumer.trace_stats_call = deferred
    endpoint.get_trace_stats()


def _observe_events(
    consumer: RemoteConsumer,
    endpoint: ConsumerEndpoint,
    request: pb.ObserveEventsRequest,
    deferred: Deferred,
) -> None:
    consumer.close_observe_events()
    consumer.observe_events = deferred
    mask = 0
    for event_type in request.events_to_observe:
        mask |= event_type
    endpoint.observe_events(mask)
    if mask == 0:
        consumer.close_observe_events()


def _query_service_state(
    _consumer: RemoteConsumer,
    endpoint: ConsumerEndpoint,
    request: pb.QueryServiceStateRequest,
    deferred: Deferred,
) -> None:
    def on_state(success: bool, state: TracingServiceState) -> None:
        if deferred.done:
            return
        if not success:
            deferred.reject()
            return
        pieces = split_service_state(state)
        last = len(pieces) - 1
        for index, piece in enumerate(pieces):
            # Sent as measured: serializing a parsed piece anew can lengthen nested sizes.
            size = bytearray(4)
            write_redundant_varint(size, 0, len(piece))
            reply = _SERVICE_STATE_TAG + size + piece
            if not _send_serialized(deferred, reply, has_more=index != last):
                return

    endpoint.query_service_state(request.sessions_only, on_state)


def _query_capabilities(
    _consumer: RemoteConsumer,
    endpoint: ConsumerEndpoint,
    _request: pb.QueryCapabilitiesRequest,
    deferred: Deferred,
) -> None:
    def on_capabilities(capabilities: TracingServiceCapabilities) -> None:
        _answer(deferred, pb.QueryCapabilitiesResponse(capabilities=capabilities))

    endpoint.query_capabilities(on_capabilities)


def _save_trace_for_bugreport(
    _consumer: RemoteConsumer,
    _endpoint: ConsumerEndpoint,
    _request: pb.SaveTraceForBugreportRequest,
    _deferred: Deferred,
) -> Message:
    return pb.SaveTraceForBugreportResponse(success=False, msg=SAVE_FOR_BUGREPORT_UNSUPPORTED)


def _clone_session(
    _consumer: RemoteConsumer,
    endpoint: ConsumerEndpoint,
    request: pb.CloneSessionRequest,
    deferred: Deferred,
) -> None:
    # Only write_into_file sessions would use the fd; their clones are read back instead.
    fd = deferred.take_received_fd()
    if fd is not None:
        os.close(fd)

    def on_cloned(result: SessionCloned) -> None:
        reply = pb.CloneSessionResponse(
            success=result.success,
            error=result.error,
            uuid_msb=result.uuid_msb,
            uuid_lsb=result.uuid_lsb,
            was_write_into_file=result.was_write_into_file,
        )
        _answer(deferred, reply)

    endpoint.clone_session(
        on_cloned,
        session_id=request.session_id,
        unique_session_name=request.unique_session_name,
    )
