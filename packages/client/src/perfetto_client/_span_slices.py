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

_spans_tracks: dict[int, tuple[NamedTrack, bytes, bytes]] = {}
"""Each thread's spans track and the fields putting a slice's begin and its end on it, by the
uuid of the thread's track."""

_open: dict[int, tuple[Track, bytes, tuple[TrackEventInstance, ...], int]] = {}
"""Span id -> (track, the fields of its slice's end, session instances, begin timestamp) of
the spans begun, whichever processor began them: a span seen by two processors (the
program's own and the one `perfetto-trace run --otel` adds) is written once."""
_told = False
"""Whether `begin_span` checked once that tracing is set up in this process."""


def _spans_track() -> tuple[Track, bytes, bytes]:
    """The calling thread's track for spans, and the fields putting a slice's begin and its
    end on it: the running asyncio task's track in a task, else a track named `spans` under
    the thread's track."""
    task = task_track() if _task_may_be_current() else None
    if task is not None:
        return task, task.event_fields(TYPE_SLICE_BEGIN), task.event_fields(TYPE_SLICE_END)
    thread = thread_state().track
    found = _spans_tracks.get(thread.uuid)
    if found is None or found[0].parent is not thread:
        track = NamedTrack("spans", parent=thread)
        found = _spans_tracks[thread.uuid] = (
            track,
            track.event_fields(TYPE_SLICE_BEGIN),
            track.event_fields(TYPE_SLICE_END),
        )
    return found


# An SDK span keeps its fields in attributes of its own, which its public properties
# (Python functions) copy or wrap: read there, a span costs a fraction of what it costs
# through them. Any other span, or one of an SDK that keeps them elsewhere, is read through
# the public API.


def _span_id(span: Any) -> int:
    """The span's id."""
    context = getattr(span, "_context", None)
    if not isinstance(context, tuple):  # not the API's SpanContext: (trace id, span id, ...)
        return int(span.context.span_id)
    if cython.compiled:  # the tuple's own item (indexing a SpanContext calls Python)
        return int(cython.cast(tuple, context)[1])
    return int(context[1])


def _name(span: Any) -> str:
    """The span's name."""
    name = getattr(span, "_name", None)
    return str(span.name if name is None else name)


def _has(span: Any, field: str) -> bool:
    """Whether the span's events (`field` "_events") or links ("_links") may be non-empty,
    read without the SDK's BoundedList (whose length is a Python method) where it can be."""
    items = getattr(span, field, True)
    return bool(getattr(items, "_dq", items))


def _status(span: Any) -> tuple[object, object]:
    """The span's status code and description."""
    status = getattr(span, "_status", None)
    code = getattr(status, "_status_code", None)
    if code is not None:
        return code, getattr(status, "_description", None)
    status = span.status
    return status.status_code, status.description


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
    span_id = _span_id(span)
    if span_id in _open:
        return
    ts = now()
    track, extra, end_fields = _spans_track()
    extra += _FLOW_ID + span_id.to_bytes(8, "little")
    if _has(span, "_links"):
        extra += flow_fields((), tuple([link.context.span_id for link in span.links]))
    name = _name(span)
    key = category.keys.get(name)
    if key is None:
        key = category.event_key(name)
    write_event(writers, key, TYPE_SLICE_BEGIN, ts, track, extra, _NO_IIDS)
    _open[span_id] = (track, end_fields, category.instances, ts)


def end_span(span: Any, error: object) -> None:
    """Ends the slice of an SDK span that ended (PerfettoSpanProcessor.on_end), `error`
    being the SDK's StatusCode.ERROR."""
    state = _open.pop(_span_id(span), None)
    if state is None:
        return
    track, extra, instances, begin_ts = state
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
    if _has(span, "_events"):
        _write_events(writers, span, track, begin_ts, ts)
    args = _attributes(span)
    code, description = _status(span)
    if code is error:
        args = dict(args)
        args["otel.status_code"] = "ERROR"
        if description:
            args["otel.status_description"] = description
    iids = _NO_IIDS
    if args:
        encoded, iids = encode_annotations(args)
        extra += encoded
    write_event(writers, 0, TYPE_SLICE_END, ts, track, extra, iids)


def _attributes(span: Any) -> dict[str, object]:
    """The span's attributes, not to be changed (the SDK's own mapping, immutable once the
    span ended, when it has one: its public view copies them under a lock)."""
    inner = getattr(getattr(span, "_attributes", None), "_dict", None)
    if type(inner) is dict:
        return inner
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
