"""Cost of the client's track event paths, with references measured in the same run.

Run: `.venv/bin/python packages/client/benchmarks/bench_client.py`. Each figure is the
median over 7 rounds of the CPU time (this thread) of N calls, per call; rounds interleave
the cases (the machine is shared). The enabled cases record into an in-process session with
a 64 MiB ring buffer. References: a plain call of the same function, viztracer recording the
same calls, viztracer's own `add_instant` / `add_counter`, an OpenTelemetry SDK span with two
attributes (no exporter), a bare interpreter.
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import perfetto_client as pc
from perfetto_client import Backend, Tracing

N = 50_000
ROUNDS = 7
clock = time.thread_time_ns

ON = pc.Category("bench.on")
OFF = pc.Category("bench.off")


def plain(x: int) -> int:
    return x


@pc.trace(ON)
def traced_on(x: int) -> int:
    return x


@pc.trace(OFF)
def traced_off(x: int) -> int:
    return x


def loop_plain() -> int:
    f = plain
    start = clock()
    for i in range(N):
        f(i)
    return clock() - start


def loop_traced_on() -> int:
    f = traced_on
    start = clock()
    for i in range(N):
        f(i)
    return clock() - start


def loop_traced_off() -> int:
    f = traced_off
    start = clock()
    for i in range(N):
        f(i)
    return clock() - start


def loop_empty_with() -> int:
    start = clock()
    for _ in range(N):
        pass
    return clock() - start


def loop_trace_event() -> int:
    trace_event = pc.trace_event
    start = clock()
    for i in range(N):
        with trace_event(ON, "step", a=i, b=2):
            pass
    return clock() - start


def loop_counter() -> int:
    counter = pc.counter
    track = pc.CounterTrack("bench counter")
    start = clock()
    for i in range(N):
        counter(ON, track, i)
    return clock() - start


def loop_instant() -> int:
    instant = pc.instant
    start = clock()
    for _ in range(N):
        instant(ON, "step")
    return clock() - start


def loop_instant_off() -> int:
    """`loop_instant` with its category disabled: the call and the check, nothing written."""
    instant = pc.instant
    start = clock()
    for _ in range(N):
        instant(OFF, "step")
    return clock() - start


def loop_counter_off() -> int:
    """`loop_counter` with its category disabled."""
    counter = pc.counter
    track = pc.CounterTrack("bench counter")
    start = clock()
    for i in range(N):
        counter(OFF, track, i)
    return clock() - start


def loop_trace_event_off() -> int:
    """`loop_trace_event` with its category disabled."""
    trace_event = pc.trace_event
    start = clock()
    for i in range(N):
        with trace_event(OFF, "step", a=i, b=2):
            pass
    return clock() - start


def _viztracer_api(method: str, *args: object) -> int:
    """CPU ns of N calls of viztracer's own `method(*args)` while it records (C calls not
    logged: the call itself is the only event)."""
    from viztracer import VizTracer  # type: ignore[import-untyped]

    tracer = VizTracer(verbose=0, tracer_entries=4 * N + 1000, ignore_c_function=True)
    tracer.start()
    call = getattr(tracer, method)
    start = clock()
    for _ in range(N):
        call(*args)
    elapsed = clock() - start
    tracer.stop()
    tracer.clear()
    return elapsed


def loop_viztracer_instant() -> int:
    return _viztracer_api("add_instant", "step")


def loop_viztracer_counter() -> int:
    return _viztracer_api("add_counter", "bench counter", {"value": 1})


def loop_viztracer_log_event() -> int:
    """CPU ns of N `with tracer.log_event("step"): pass` while viztracer records (its
    context manager's Python calls are logged too, as for any program it traces)."""
    from viztracer import VizTracer

    tracer = VizTracer(verbose=0, tracer_entries=8 * N + 1000, ignore_c_function=True)
    tracer.start()
    log_event = tracer.log_event
    start = clock()
    for _ in range(N):
        with log_event("step"):
            pass
    elapsed = clock() - start
    tracer.stop()
    tracer.clear()
    return elapsed


def loop_viztracer() -> int:
    from viztracer import VizTracer

    tracer = VizTracer(verbose=0, tracer_entries=4 * N + 1000)
    f = plain
    tracer.start()
    start = clock()
    for i in range(N):
        f(i)
    elapsed = clock() - start
    tracer.stop()
    tracer.clear()
    return elapsed


def make_otel() -> Callable[[], int]:
    from opentelemetry.sdk.trace import TracerProvider

    tracer = TracerProvider().get_tracer("bench")

    def loop_otel() -> int:
        span = tracer.start_as_current_span
        start = clock()
        for i in range(N):
            with span("step", attributes={"a": i, "b": 2}):
                pass
        return clock() - start

    return loop_otel


def import_cost(code: str, runs: int = 7) -> float:
    """Median CPU seconds of `python -c code` (children's rusage)."""
    samples = []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([sys.executable, "-c", code], check=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        samples.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return statistics.median(samples)


def start_session() -> pc.TracingSession:
    """Starts the in-process session recording category bench.on (the enabled cases)."""
    Tracing.initialize(Backend.IN_PROCESS)
    session = Tracing.new_trace()
    session.setup(
        {
            "buffers": [{"size_kb": 65536, "fill_policy": "RING_BUFFER"}],
            "data_sources": [
                {
                    "config": {
                        "name": "track_event",
                        "track_event_config": {
                            "enabled_categories": ["bench.on"],
                            "disabled_categories": ["*"],
                        },
                    }
                }
            ],
        }
    )
    session.start()
    assert ON.enabled
    assert not OFF.enabled
    return session


def main() -> None:
    session = start_session()
    cases: dict[str, Callable[[], int]] = {
        "plain": loop_plain,
        "traced_on": loop_traced_on,
        "traced_off": loop_traced_off,
        "empty": loop_empty_with,
        "trace_event": loop_trace_event,
        "counter": loop_counter,
        "instant": loop_instant,
        "viztracer_instant": loop_viztracer_instant,
        "viztracer_counter": loop_viztracer_counter,
        "viztracer": loop_viztracer,
        "otel": make_otel(),
    }
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(ROUNDS):
        for name, case in cases.items():
            samples[name].append(case() / N)
    session.stop()
    med = {name: statistics.median(values) for name, values in samples.items()}
    bare = import_cost("pass")
    imported = import_cost("import perfetto_client")
    build = "compiled" if _compiled() else "pure"
    per_plain = med["plain"]
    rows = [
        (
            "@trace call, category enabled",
            med["traced_on"] - per_plain,
            f"viztracer {med['viztracer'] - per_plain:.0f} ns/call over plain "
            f"(plain call {per_plain:.0f} ns)",
        ),
        (
            "with trace_event(...), two int args",
            med["trace_event"] - med["empty"],
            f"OpenTelemetry span, two attributes {med['otel'] - med['empty']:.0f} ns",
        ),
        (
            "@trace call, category disabled",
            med["traced_off"] - per_plain,
            f"plain call {per_plain:.0f} ns",
        ),
        (
            'instant(cat, "n")',
            med["instant"] - med["empty"],
            f"viztracer add_instant {med['viztracer_instant'] - med['empty']:.0f} ns",
        ),
        (
            "counter(cat, track, i)",
            med["counter"] - med["empty"],
            f"viztracer add_counter {med['viztracer_counter'] - med['empty']:.0f} ns",
        ),
    ]
    print(f"perfetto_client hot paths ({build} build), CPU ns per call, median of {ROUNDS}")
    print(f"| path | {build} | reference in the same run |")
    print("|---|---|---|")
    for label, value, reference in rows:
        print(f"| {label} | +{value:.0f} ns | {reference} |")
    print(
        f"| import perfetto_client | {(imported - bare) * 1000:.0f} ms over bare | "
        f"bare interpreter {bare * 1000:.0f} ms |"
    )
    ratio_viz = (med["viztracer"] - per_plain) / max(med["traced_on"] - per_plain, 1)
    ratio_otel = (med["otel"] - med["empty"]) / max(med["trace_event"] - med["empty"], 1)
    ratio_instant = (med["viztracer_instant"] - med["empty"]) / max(
        med["instant"] - med["empty"], 1
    )
    ratio_counter = (med["viztracer_counter"] - med["empty"]) / max(
        med["counter"] - med["empty"], 1
    )
    print(f"viztracer/@trace overhead ratio: {ratio_viz:.2f}; OTel/trace_event: {ratio_otel:.2f}")
    print(
        f"viztracer add_instant/instant: {ratio_instant:.2f}; "
        f"add_counter/counter: {ratio_counter:.2f}"
    )


def _compiled() -> bool:
    from perfetto_client import _track_event_writer

    return not _track_event_writer.__file__.endswith(".py")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
