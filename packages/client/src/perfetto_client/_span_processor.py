"""The OpenTelemetry bridge: every span of an SDK TracerProvider as a slice in the trace."""

from __future__ import annotations

from typing import TYPE_CHECKING

from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.trace import StatusCode

from perfetto_client._span_slices import OTEL_CATEGORY, begin_span, end_span

if TYPE_CHECKING:
    from opentelemetry.context import Context

__all__ = ["OTEL_CATEGORY", "PerfettoSpanProcessor"]

_ERROR = StatusCode.ERROR


class PerfettoSpanProcessor(SpanProcessor):
    """Writes each span as a slice named after it, while a session records category `otel`.

    A span begins on the track of the thread (or asyncio task) that starts it and ends on
    that same track, whichever thread ends it. Its attributes become debug annotations
    (with `otel.status_code` and `otel.status_description` for status ERROR), its events
    instants, and each of its links a flow from the linked span's slice to its own. A span
    is written once however many PerfettoSpanProcessors see it. The first span started
    while nothing in the process can record (no session, tracing not initialized) prints
    one line on stderr saying so.
    """

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        """Begins the span's slice."""
        begin_span(span)

    def on_end(self, span: ReadableSpan) -> None:
        """Ends the span's slice on the track it began on, with its attributes and events."""
        end_span(span, _ERROR)

    def shutdown(self) -> None:
        """Nothing to release: the tracing sessions own what was written."""

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Nothing is buffered here: events are in the sessions' buffers once written."""
        del timeout_millis
        return True
