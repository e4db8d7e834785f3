"""OpenTelemetry SDK spans written as slices: what `PerfettoSpanProcessor` calls (the SDK is
not imported here; compiled, `_span_slices.pxd`)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from perfetto_protos.tags.fields import TrackEvent_flow_ids_TAG
from protozero import encode_varint

from perfetto_client._categories import Category
from perfetto_client._task_tracks import task_track
from perfetto_client._track_event_writer import (
    TYPE_INSTANT,
    TYPE_SLICE_BEGIN,
    TYPE_SLICE_END,
    flow_fields,
)
from perfetto_client._tracks import NamedTrack, Track
from perfetto_client._unrecorded import tell_if_nowhere_to_write

try:
    import cython
except ImportError:  # installed without Cython: runs as pure Python
    from protozero import _cython_shim as cython

if not cython.compiled:  # compiled, _span_slices.pxd cimports them
    from perfetto_client._debug_annotations import encode_annotations
    from perfetto_client._events import _task_may_be_current
    from perfetto_client._track_event import now, thread_state, thread_writers, write_event

if TYPE_CHECKING:
    from perfetto_client._track_event import TrackEventInstance

__all__ = ["OTEL_CATEGORY", "begin_span", "end_span"]

OTEL_CATEGORY = Category("otel", description="OpenTelemetry spans (PerfettoSpanProcessor)")

_FLOW_ID = encode_varint(TrackEvent_flow_ids_TAG)
_NO_IIDS: list[int] = []

_spans_tracks: dict[int, tuple[NamedTrack, bytes]] = {}
"""Each thread's spans track and its track_uuid field, by the uuid of the thread's track."""

_open: dict[int, tuple[Track, tuple[TrackEventInstance, ...], int]] = {}
"""Span id -> (track, session instances, begin timestamp) of the spans begun, whichever
processor began them: a span seen by two processors (the program's own and the one
`perfetto-trace run --otel` adds) is written once."""
_told = False
"""Whether `begin_span` checked once that tracing is set up in this process."""


def _spans_track(event_type: int) -> tuple[Track, bytes]:
    """The calling thread's track for spans, and the fields putting an event of
    `event_type` on it: the running asyncio task's track in a task, else a track named
    `spans` under the thread's track."""
    task = task_track() if _task_may_be_current() else None
    if task is not None:
        return task, task.event_fields(event_type)
    thread = thread_state().track
    found = _spans_tracks.get(thread.uuid)
    if found is None or found[0].parent is not thread:
        track = NamedTrack("spans", parent=thread)
        found = _spans_tracks[thread.uuid] = (track, track.uuid_field)
    return found


def begin_span(span: Any) -> None:
    """Begins the slice of an SDK span that starts (PerfettoSpanProcessor.on_start)."""
    global _told  # noqa: PLW0603 - checked once per process
    category = OTEL_CATEGORY
    if not category.enabled:
        if not _told:
            _told = True
            tell_if_nowhere_to_write("PerfettoSpanProcessor")
        return
    writers = thread_writers(category.mask)
    if not writers:
        return
    span_id: int = span.context.span_id
    if span_id in _open:
        return
    ts = now()
    track, extra = _spans_track(TYPE_SLICE_BEGIN)
    extra += _FLOW_ID + span_id.to_bytes(8, "little")
    if getattr(span, "_links", True):  # the SDK's own list: no copy when it is empty
        extra += flow_fields((), tuple([link.context.span_id for link in span.links]))
    key = category.keys.get(span.name)
    if key is None:
        key = category.event_key(span.name)
    write_event(writers, key, TYPE_SLICE_BEGIN, ts, track, extra, _NO_IIDS)
    _open[span_id] = (track, category.instances, ts)


def end_span(span: Any, error: object) -> None:
    """Ends the slice of an SDK span that ended (PerfettoSpanProcessor.on_end), `error`
    being the SDK's StatusCode.ERROR."""
    state = _open.pop(span.context.span_id, None)
    if state is None:
        return
    track, instances, begin_ts = state
    category = OTEL_CATEGORY
    if category.instances is instances:
        mask = category.mask
    else:  # sessions started or stopped since: end it where it began, if still running
        mask = 0
        for instance in instances:
            if instance in category.instances:
                mask |= 1 << instance.slot
        if not mask:
            return
    writers = thread_writers(mask)
    ts = now()
    if getattr(span, "_events", True):  # the SDK's own list: no copy when it is empty
        _write_events(writers, span, track, begin_ts, ts)
    args = _attributes(span)
    status = span.status
    if status.status_code is error:
        args["otel.status_code"] = "ERROR"
        if status.description:
            args["otel.status_description"] = status.description
    extra = track.event_fields(TYPE_SLICE_END)
    iids = _NO_IIDS
    if args:
        encoded, iids = encode_annotations(args)
        extra += encoded
    write_event(writers, 0, TYPE_SLICE_END, ts, track, extra, iids)


def _attributes(span: Any) -> dict[str, object]:
    """A copy of the span's attributes (read from the SDK's own mapping, immutable once the
    span ended, when it has one: its public view copies them under a lock)."""
    inner = getattr(getattr(span, "_attributes", None), "_dict", None)
    if isinstance(inner, dict):
        return dict(inner)
    return dict(span.attributes or {})


def _write_events(writers: Any, span: Any, track: Track, begin: int, end: int) -> None:
    """The span's events as instants on its track, at their times on the trace clock (kept
    within the slice)."""
    offset = now() - time.time_ns()
    for event in span.events:
        ts = min(max(event.timestamp + offset, begin), end)
        key = OTEL_CATEGORY.event_key(event.name)
        extra = track.event_fields(TYPE_INSTANT)
        iids: list[int] = []
        if event.attributes:
            encoded, iids = encode_annotations(dict(event.attributes))
            extra += encoded
        write_event(writers, key, TYPE_INSTANT, ts, track, extra, iids)
