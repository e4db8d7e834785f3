"""CloneSession: a read-only snapshot of a running session, handed to another consumer.

As upstream's TracingServiceImpl::FlushAndCloneSession: the source session is flushed, its
buffers are copied, and the copies become a new session in state CLONED_READ_ONLY bound to the
asking consumer, which reads it back like any other. The source session keeps tracing.
"""

from __future__ import annotations

import collections
import copy
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

from perfetto_protos.common.trace_stats_pb2 import TraceStats
from perfetto_protos.tags.fields import (
    TracingServiceEvent_clone_started_ID,
    TracingServiceEvent_tracing_disabled_ID,
)

from perfetto_service._interfaces import SessionCloned
from perfetto_service.core._service_packets import boot_time_ns
from perfetto_service.core._session import SessionState, TracingSession
from perfetto_service.core._trace_buffer import TraceBuffer

if TYPE_CHECKING:
    from perfetto_service.core._consumer_endpoint import ConsumerEndpointImpl
    from perfetto_service.core._tracing_service import TracingService

__all__ = ["clone_buffer", "clone_session"]

_CLONE_FLUSH_FLAGS = (1 << 4) | 3  # initiator traced, reason trace clone


def clone_buffer(buffer: TraceBuffer) -> TraceBuffer:
    """A copy of `buffer` (contents, chunk index, sequences, stats) that reads on its own."""
    return buffer.clone()


def _find_source(
    service: TracingService, uid: int, session_id: int, unique_name: str
) -> tuple[TracingSession | None, str]:
    source: TracingSession | None = None
    if session_id:
        source = service.session(session_id)
    elif unique_name:
        source = next(
            (
                s
                for s in service._sessions.values()
                if s.config.unique_session_name == unique_name
                and s.state is not SessionState.CLONED_READ_ONLY
            ),
            None,
        )
    if source is None:
        return None, "Tracing session not found"
    allowed = uid in (0, source.consumer_uid) or source.config.bugreport_score > 0
    if not allowed:
        return None, "Not allowed to clone a session from another UID"
    return source, ""


def clone_session(
    service: TracingService,
    consumer: ConsumerEndpointImpl,
    *,
    session_id: int = 0,
    unique_name: str = "",
    callback: Callable[[SessionCloned], None],
) -> None:
    """Flushes the source session, then snapshots it into a new session for `consumer`."""
    source, error = _find_source(service, consumer.uid, session_id, unique_name)
    if source is None:
        callback(SessionCloned(False, error))
        return
    source_id = source.id
    started_ns = boot_time_ns()

    def flushed(success: bool) -> None:
        callback(_finish(service, consumer, source_id, started_ns, flush_ok=success))

    service.flush(source_id, 0, flushed, _CLONE_FLUSH_FLAGS)


def _finish(
    service: TracingService,
    consumer: ConsumerEndpointImpl,
    source_id: int,
    started_ns: int,
    *,
    flush_ok: bool,
) -> SessionCloned:
    source = service.session(source_id)
    if source is None:
        return SessionCloned(False, "session not found")
    if consumer.tracing_session_id or not consumer.connected:
        return SessionCloned(False, "The consumer is already attached to another tracing session")
    sessions = service._sessions
    buffers = service._buffers
    service._last_session_id += 1
    new_id = service._last_session_id
    msb = int.from_bytes(uuid.uuid4().bytes[8:], "little", signed=True)
    clone = TracingSession(
        new_id, consumer, copy.deepcopy(source.config), (msb, source.trace_uuid[1])
    )
    clone.state = SessionState.CLONED_READ_ONLY
    for buffer_id in source.buffers_index:
        original = buffers.get(buffer_id)
        if original is None:
            continue
        clone_id = service._next_buffer_id()
        buffers[clone_id] = clone_buffer(original)
        clone.buffers_index.append(clone_id)
    clone.should_emit_stats = True
    clone.received_triggers = source.received_triggers
    source.received_triggers = []
    source.num_triggers_emitted = 0
    clone.lifecycle_events = copy.deepcopy(source.lifecycle_events)
    clone.slow_start_event = source.slow_start_event
    clone.last_flush_events = list(source.last_flush_events)
    clone.initial_clock_snapshot = list(source.initial_clock_snapshot)
    clone.clock_snapshot_ring = collections.deque(
        source.clock_snapshot_ring, maxlen=source.clock_snapshot_ring.maxlen
    )
    clone.invalid_packets = source.invalid_packets
    clone.flushes_requested = source.flushes_requested
    clone.flushes_succeeded = source.flushes_succeeded
    clone.flushes_failed = source.flushes_failed
    clone.final_flush_outcome = (
        TraceStats.FINAL_FLUSH_SUCCEEDED if flush_ok else TraceStats.FINAL_FLUSH_FAILED
    )
    clone.record_lifecycle_event(TracingServiceEvent_clone_started_ID, started_ns)
    clone.record_lifecycle_event(TracingServiceEvent_tracing_disabled_ID, boot_time_ns())
    sessions[new_id] = clone
    consumer.tracing_session_id = new_id
    return SessionCloned(True, "", clone.trace_uuid[0], clone.trace_uuid[1])
