"""The OpenTelemetry bridge with the real SDK: spans as slices, checked with upstream's schema."""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace

from in_process_recording import Recorder
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, Status, StatusCode, Tracer
from perfetto_client.otel import PerfettoSpanProcessor


def _tracer() -> tuple[Tracer, InMemorySpanExporter]:
    provider = TracerProvider()
    provider.add_span_processor(PerfettoSpanProcessor())
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider.get_tracer("tests"), exporter


def test_spans_nest_as_slices_with_their_attributes(record: Recorder) -> None:
    tracer, exporter = _tracer()

    def body() -> None:
        with tracer.start_as_current_span("request", attributes={"route": "/a", "n": 3}) as outer:
            with tracer.start_as_current_span("query") as inner:
                inner.set_attribute("rows", 12)
                inner.set_attribute("tags", ("x", "y"))
            outer.set_attribute("status", 200)

    trace = record(body)
    slices = {s.name: s for s in trace.slices()}
    request, query = slices["request"], slices["query"]
    assert (request.depth, query.depth) == (0, 1)
    assert request.track == query.track
    assert request.begin < query.begin <= query.end < request.end  # type: ignore[operator]
    assert request.categories == ["otel"]
    assert request.args == {"route": "/a", "n": 3, "status": 200}
    assert query.args == {"rows": 12, "tags": ["x", "y"]}
    # The spans' track is the thread's own spans track, under the thread's track.
    track = trace.tracks[request.track]
    assert track.name == "spans"
    assert trace.tracks[track.parent_uuid].thread.tid == threading.get_native_id()
    assert len(exporter.get_finished_spans()) == 2  # the other processor saw them too


def test_events_are_instants_and_error_status_an_annotation(record: Recorder) -> None:
    tracer, _ = _tracer()

    def body() -> None:
        with tracer.start_as_current_span("job") as span:
            span.add_event("retry", {"attempt": 2})
            span.set_status(Status(StatusCode.ERROR, "gave up"))

    trace = record(body)
    [job] = [s for s in trace.slices() if s.name == "job"]
    [retry] = [s for s in trace.slices() if s.name == "retry"]
    assert retry.begin == retry.end
    assert job.begin <= retry.begin <= job.end  # type: ignore[operator]
    assert retry.track == job.track
    assert retry.depth == 1
    assert retry.args == {"attempt": 2}
    assert job.args["otel.status_code"] == "ERROR"
    assert job.args["otel.status_description"] == "gave up"


def test_a_link_is_a_flow_between_the_spans(record: Recorder) -> None:
    tracer, _ = _tracer()

    def body() -> None:
        with tracer.start_as_current_span("producer") as producer:
            pass
        with tracer.start_as_current_span("other"):
            pass
        link = Link(producer.get_span_context())
        with tracer.start_as_current_span("consumer", links=[link]):
            pass

    trace = record(body)
    links = [(a.name, b.name) for a, b in trace.flow_links()]
    assert links == [("producer", "consumer")]


def test_a_span_ended_on_another_thread_ends_on_its_own_track(record: Recorder) -> None:
    tracer, _ = _tracer()

    def body() -> None:
        span = tracer.start_span("handed over")
        with tracer.start_as_current_span("before"):
            pass
        thread = threading.Thread(target=span.end, name="ender")
        thread.start()
        thread.join()

    trace = record(body)
    slices = {s.name: s for s in trace.slices()}
    handed = slices["handed over"]
    assert handed.end is not None
    assert handed.track == slices["before"].track
    assert slices["before"].depth == 1
    ends = [e for e in trace.events if e.kind == "E" and e.track == handed.track]
    assert len({e.seq for e in ends}) == 2  # one end written by the main thread, one by "ender"


def test_spans_in_asyncio_tasks_go_on_the_task_tracks(record: Recorder) -> None:
    tracer, _ = _tracer()

    async def work(name: str) -> None:
        with tracer.start_as_current_span(name):
            await asyncio.sleep(0.01)

    async def main() -> None:
        await asyncio.gather(work("a"), work("b"))

    trace = record(lambda: asyncio.run(main()))
    slices = {s.name: s for s in trace.slices()}
    a, b = slices["a"], slices["b"]
    assert a.track != b.track  # they overlap in time: one track per task
    assert trace.track_name(a.track).startswith("task ")
    assert a.end is not None
    assert b.end is not None


def test_spans_are_not_written_without_a_session_recording_otel(record: Recorder) -> None:
    tracer, exporter = _tracer()
    with tracer.start_as_current_span("before the session"):
        pass
    trace = record(
        lambda: tracer.start_span("inside").end(),
        {
            "data_sources": [
                {
                    "config": {
                        "name": "track_event",
                        "track_event_config": {"disabled_categories": ["otel"]},
                    }
                }
            ]
        },
    )
    assert trace.slices() == []
    assert len(exporter.get_finished_spans()) == 2


class _PublicSpan:
    """A span of another SDK: only the API's public properties, none of the SDK's fields."""

    def __init__(self, name: str, span_id: int, status: Status, **attributes: object) -> None:
        self.name = name
        self.context = SimpleNamespace(span_id=span_id)
        self.status = status
        self.attributes = attributes
        self.events: tuple[object, ...] = ()
        self.links: tuple[object, ...] = ()


def test_a_span_read_through_the_public_api_alone_is_written_the_same(record: Recorder) -> None:
    processor = PerfettoSpanProcessor()

    def body() -> None:
        outer = _PublicSpan("outer", 7, Status(StatusCode.UNSET), route="/b")
        inner = _PublicSpan("inner", 8, Status(StatusCode.ERROR, "broke"), rows=3)
        processor.on_start(outer)  # type: ignore[arg-type]
        processor.on_start(inner)  # type: ignore[arg-type]
        processor.on_end(inner)  # type: ignore[arg-type]
        processor.on_end(outer)  # type: ignore[arg-type]

    trace = record(body)
    slices = {s.name: s for s in trace.slices()}
    outer, inner = slices["outer"], slices["inner"]
    assert (outer.depth, inner.depth) == (0, 1)
    assert outer.args == {"route": "/b"}
    assert inner.args == {
        "rows": 3,
        "otel.status_code": "ERROR",
        "otel.status_description": "broke",
    }
