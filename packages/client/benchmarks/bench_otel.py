"""Cost per span of `PerfettoSpanProcessor`, against the SDK's own `SimpleSpanProcessor` with an
`InMemorySpanExporter`, measured in the same run; and per record of `PerfettoLogHandler`,
against a `logging.StreamHandler` writing to /dev/null.

Run: `.venv/bin/python packages/client/benchmarks/bench_otel.py` (compiled build) and with
`PERFETTO_PY_PURE=1` (pure). Each figure is the median over 7 rounds of the CPU time (this
thread) of N spans (`with tracer.start_as_current_span("step", attributes={"a": i, "b": 2})`)
or N `logger.info("step %d", i)` records, per span or record, over the same loop with a
TracerProvider without processors (a logger without handlers); a processor that does nothing
is the floor of any processor. Rounds interleave the cases;
the Perfetto cases record into an in-process session with a 64 MiB ring buffer.

`--callgrind` counts instead the instructions per span of each processor over the loop
without processors (valgrind installed; each case in its own process, callgrind counting
inside the loop only), load-independent.
"""

from __future__ import annotations

import itertools
import logging
import os
import statistics
import sys
import time
from collections.abc import Callable

from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from perfetto_client import Backend, Tracing, TracingSession
from perfetto_client.logging import PerfettoLogHandler
from perfetto_client.otel import PerfettoSpanProcessor
from perfetto_testing import loop_instructions, report_row

N = 20_000
ROUNDS = 7
clock = time.thread_time_ns


def span_loop(
    provider: TracerProvider, after: Callable[[], None] = lambda: None
) -> Callable[[], int]:
    span = provider.get_tracer("bench").start_as_current_span

    def loop() -> int:
        start = clock()
        for i in range(N):
            with span("step", attributes={"a": i, "b": 2}):
                pass
        elapsed = clock() - start
        after()
        return elapsed

    return loop


class NoopSpanProcessor(SpanProcessor):
    """A processor that does nothing: what any processor costs the SDK (the floor)."""

    def on_start(self, span: object, parent_context: object = None) -> None:
        """Nothing."""

    def on_end(self, span: object) -> None:
        """Nothing."""


def log_loop(name: str, handler: logging.Handler | None) -> Callable[[], int]:
    logger = logging.getLogger(name)
    logger.propagate = False
    logger.setLevel(logging.INFO)
    if handler is not None:
        logger.addHandler(handler)

    def loop() -> int:
        info = logger.info
        start = clock()
        for i in range(N):
            info("step %d", i)
        return clock() - start

    return loop


CALLGRIND_SPANS = 5_000
PROCESSORS: dict[str, Callable[[], SpanProcessor | None]] = {
    "none": lambda: None,
    "doing nothing": NoopSpanProcessor,
    "SimpleSpanProcessor + InMemorySpanExporter": lambda: SimpleSpanProcessor(
        InMemorySpanExporter()
    ),
    "PerfettoSpanProcessor": PerfettoSpanProcessor,
}


def callgrind_child(name: str) -> None:
    """CALLGRIND_SPANS spans through the processor `name` (what callgrind counts, inside
    `itertools.starmap`), after a few uncounted ones."""
    session = start_session()
    provider = TracerProvider()
    processor = PROCESSORS[name]()
    if processor is not None:
        provider.add_span_processor(processor)
    span = provider.get_tracer("bench").start_as_current_span

    def spans(count: int) -> None:
        for i in range(count):
            with span("step", attributes={"a": i, "b": 2}):
                pass

    spans(100)
    list(itertools.starmap(spans, [(CALLGRIND_SPANS,)]))
    session.stop()


def callgrind() -> None:
    """Instructions per span of each processor over none, each counted in its own process."""
    argv = [sys.executable, __file__, "--callgrind-child"]
    counts = {name: loop_instructions([*argv, name]) for name in PROCESSORS}
    build = "compiled" if _compiled() else "pure"
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    print(f"instructions per span over no processor ({build} build, Python {version}, callgrind)")
    reference = (
        counts["SimpleSpanProcessor + InMemorySpanExporter"] - counts["none"]
    ) / CALLGRIND_SPANS
    for name in list(PROCESSORS)[1:]:
        per_span = (counts[name] - counts["none"]) / CALLGRIND_SPANS
        print(f"  {name:44} {per_span:8,.0f}   {per_span / reference:.2f}x")


def start_session() -> TracingSession:
    """An in-process session recording categories `otel` and `log` into a 64 MiB ring."""
    Tracing.initialize(Backend.IN_PROCESS)
    session = Tracing.new_trace()
    session.setup(
        {
            "buffers": [{"size_kb": 65536, "fill_policy": "RING_BUFFER"}],
            "data_sources": [
                {
                    "config": {
                        "name": "track_event",
                        "track_event_config": {"enabled_categories": ["otel", "log"]},
                    }
                }
            ],
        }
    )
    session.start()
    return session


def main() -> None:
    session = start_session()
    bare = TracerProvider()
    simple = TracerProvider()
    exporter = InMemorySpanExporter()
    simple.add_span_processor(SimpleSpanProcessor(exporter))
    perfetto = TracerProvider()
    perfetto.add_span_processor(PerfettoSpanProcessor())
    noop = TracerProvider()
    noop.add_span_processor(NoopSpanProcessor())
    devnull = open(os.devnull, "w")  # noqa: SIM115 - open for the whole run
    cases = {
        "bare": span_loop(bare),
        "simple": span_loop(simple, exporter.clear),
        "perfetto": span_loop(perfetto),
        "noop": span_loop(noop),
        "no handler": log_loop("bench.none", None),
        "stream": log_loop("bench.stream", logging.StreamHandler(devnull)),
        "perfetto log": log_loop("bench.perfetto", PerfettoLogHandler()),
    }
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(ROUNDS):
        for name, case in cases.items():
            samples[name].append(case() / N)
    session.stop()
    session.close()
    med = {name: statistics.median(values) for name, values in samples.items()}
    build = "compiled" if _compiled() else "pure"
    ours = med["perfetto"] - med["bare"]
    theirs = med["simple"] - med["bare"]
    floor = med["noop"] - med["bare"]
    log_ours = med["perfetto log"] - med["no handler"]
    log_theirs = med["stream"] - med["no handler"]
    print(f"OpenTelemetry and logging bridges ({build} build), CPU ns, median of {ROUNDS}")
    print(f"| per | {build} | reference in the same run | ratio |")
    print("|---|---|---|---|")
    print(
        f"| span, PerfettoSpanProcessor | +{ours:.0f} ns | SimpleSpanProcessor + "
        f"InMemorySpanExporter +{theirs:.0f} ns (span without processors {med['bare']:.0f} ns; "
        f"a processor doing nothing +{floor:.0f} ns) "
        f"| {ours / max(theirs, 1):.2f}x |"
    )
    print(
        f"| record, PerfettoLogHandler | +{log_ours:.0f} ns | StreamHandler to /dev/null "
        f"+{log_theirs:.0f} ns (no handler {med['no handler']:.0f} ns) "
        f"| {log_ours / max(log_theirs, 1):.2f}x |"
    )
    report_row(
        "otel_span",
        measured=ours,
        reference=theirs,
        cost_ratio=ours / max(theirs, 1),
        unit="ns CPU per span",
        reference_name="`SimpleSpanProcessor` + `InMemorySpanExporter`",
        floor=f"a processor doing nothing +{floor:.0f} ns (no processor {med['bare']:.0f} ns)",
    )


def _compiled() -> bool:
    from perfetto_client import _track_event_writer

    return not _track_event_writer.__file__.endswith(".py")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--callgrind-child"]:
        callgrind_child(sys.argv[2])
    elif sys.argv[1:2] == ["--callgrind"]:
        callgrind()
    else:
        main()
