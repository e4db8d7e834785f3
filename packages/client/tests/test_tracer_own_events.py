"""A program's own track events, spans and log records under `perfetto-trace run`, with no
set-up of its own (issue #30), and the one line a hand-wired bridge prints when nothing
records it.

Each program runs as a user types it: `perfetto-trace run src/prog.py` from another
directory, in a subprocess; the trace is read with upstream's schema.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from trace_model import Slice as ModelSlice
from trace_model import TraceModel
from tracer_support import HOOKS, Slice, client_events, decode, require_compiled_hook

PERFETTO_TRACE = str(Path(sys.executable).parent / "perfetto-trace")

TRACK_EVENTS = """\
import perfetto_client as pc


def work(n):
    with pc.trace_event("app", "phase", n=n):
        pc.instant("app", "checkpoint", step=1)
        for i in range(3):
            pc.counter("app", "queue", i * 10)
        return n * 2


print(work(21))
"""

SPANS = """\
from opentelemetry.sdk.trace import TracerProvider

from perfetto_client.otel import PerfettoSpanProcessor

provider = TracerProvider()
provider.add_span_processor(PerfettoSpanProcessor())
tracer = provider.get_tracer("shop")


def reserve(item):
    with tracer.start_as_current_span("reserve", attributes={"item": item}):
        pass


def checkout():
    with tracer.start_as_current_span("checkout", attributes={"items": 2}):
        reserve("book")
        reserve("pen")


checkout()
print("ok")
"""

LOGS = """\
import logging

from perfetto_client.logging import PerfettoLogHandler

log = logging.getLogger("shop")
log.setLevel(logging.INFO)
log.addHandler(PerfettoLogHandler(logging.INFO))


def reserve(item):
    log.info("reserved %s", item)


reserve("book")
reserve("pen")
log.debug("not at this level")
log.warning("stock is low")
print("ok")
"""


def _run(
    tmp_path: Path, program: str, options: list[str], hook: str
) -> tuple[subprocess.CompletedProcess[str], Path]:
    """`perfetto-trace run [options] src/prog.py` from `tmp_path`/elsewhere."""
    if hook == "compiled":
        require_compiled_hook()
    src = tmp_path / "src"
    src.mkdir()
    (src / "prog.py").write_text(program)
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    pure = ["--pure"] if hook == "pure" else []
    proc = subprocess.run(
        [PERFETTO_TRACE, "run", *pure, *options, "../src/prog.py"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "0 lost" in proc.stderr, proc.stderr
    return proc, cwd / "trace.pftrace"


def _plain(tmp_path: Path, program: str) -> subprocess.CompletedProcess[str]:
    """`python prog.py`: no session anywhere."""
    (tmp_path / "prog.py").write_text(program)
    return subprocess.run(
        [sys.executable, "prog.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={k: v for k, v in os.environ.items() if not k.startswith("PERFETTO_TRACE")},
    )


def _main_slice(path: Path, name: str) -> Slice:
    """The one slice `name` of the main thread's recorded calls."""
    [main] = decode(path).by_name("MainThread")
    [found] = [s for s in main.slices if s.name == name]
    return found


def _within(item: ModelSlice, call: Slice) -> bool:
    """Whether a slice of the program's own events lies inside one of its recorded calls."""
    end = item.end if item.end is not None else item.begin
    return call.ts <= item.begin and end <= call.ts + call.dur


@pytest.mark.parametrize("hook", HOOKS)
def test_track_events_without_initialize(tmp_path: Path, hook: str) -> None:
    proc, out = _run(tmp_path, TRACK_EVENTS, [], hook)
    assert proc.stdout == "42\n"
    work = _main_slice(out, "work")
    assert [c.name for c in work.children if c.name == "phase"] == ["phase"]
    model = client_events(out)
    app = [s for s in model.slices() if s.categories == ["app"]]
    assert [(s.name, s.args) for s in app] == [("phase", {"n": 21}), ("checkpoint", {"step": 1})]
    phase, checkpoint = app
    assert checkpoint.depth == phase.depth + 1
    assert checkpoint.track == phase.track
    assert model.track_name(phase.track) == "MainThread"
    assert all(_within(s, work) for s in app)
    assert model.counters("queue") == [0, 10, 20]


@pytest.mark.parametrize("options", [[], ["--otel"]], ids=["alone", "with --otel"])
@pytest.mark.parametrize("hook", HOOKS)
def test_a_span_processor_the_program_adds(tmp_path: Path, hook: str, options: list[str]) -> None:
    pytest.importorskip("opentelemetry.sdk")
    proc, out = _run(tmp_path, SPANS, options, hook)
    assert proc.stdout == "ok\n"
    model = client_events(out)
    spans = [s for s in model.slices() if s.categories == ["otel"]]
    # Once each, even with --otel adding its own processor to the same provider.
    assert [(s.name, s.depth, s.args) for s in spans] == [
        ("checkout", 0, {"items": 2}),
        ("reserve", 1, {"item": "book"}),
        ("reserve", 1, {"item": "pen"}),
    ]
    [track] = {s.track for s in spans}
    assert model.track_name(track) == "spans"
    assert model.track_name(model.tracks[track].parent_uuid) == "MainThread"
    checkout = _main_slice(out, "checkout")
    assert all(_within(s, checkout) for s in spans)
    reserves = [s for s in decode(out).by_name("MainThread")[0].slices if s.name == "reserve"]
    assert [_within(span, call) for span, call in zip(spans[1:], reserves, strict=True)] == [
        True,
        True,
    ]


@pytest.mark.parametrize(
    "options", [[], ["--logging", "INFO"], ["--logging", "DEBUG"]], ids=["alone", "INFO", "DEBUG"]
)
@pytest.mark.parametrize("hook", HOOKS)
def test_a_log_handler_the_program_adds(tmp_path: Path, hook: str, options: list[str]) -> None:
    proc, out = _run(tmp_path, LOGS, options, hook)
    assert proc.stdout == "ok\n"
    model = client_events(out)
    logs = [e for e in model.events if e.log is not None]
    # Once each, even when --logging also hands the root logger's records to a handler.
    assert [(e.name, e.log.body, e.log.function, e.log.prio) for e in logs if e.log] == [
        ("INFO", "reserved book", "reserve", 4),
        ("INFO", "reserved pen", "reserve", 4),
        ("WARNING", "stock is low", "<module>", 5),
    ]
    assert {model.track_name(e.track) for e in logs} == {"MainThread"}
    [main] = decode(out).by_name("MainThread")
    reserves = [s for s in main.slices if s.name == "reserve"]
    within = [
        call.ts <= e.ts <= call.ts + call.dur for e, call in zip(logs[:2], reserves, strict=True)
    ]
    assert within == [True, True]


@pytest.mark.parametrize("hook", HOOKS)
def test_initialize_and_a_session_of_the_programs_own(tmp_path: Path, hook: str) -> None:
    # The program's own session gets its events; the trace gets them once, not twice.
    program = """\
import perfetto_client as pc

pc.Tracing.initialize(pc.Backend.IN_PROCESS)
session = pc.Tracing.new_trace(pc.Backend.IN_PROCESS)
session.setup(
    {"buffers": [{"size_kb": 1024}], "data_sources": [{"config": {"name": "track_event"}}]},
    output="own.pftrace",
)
session.start()
pc.instant("app", "mark")
session.stop()
session.close()
pc.instant("app", "after")
"""
    _, out = _run(tmp_path, program, [], hook)
    names = [s.name for s in client_events(out).slices() if s.categories == ["app"]]
    assert names == ["mark", "after"]
    own = TraceModel((out.parent / "own.pftrace").read_bytes())
    assert [s.name for s in own.slices() if s.categories == ["app"]] == ["mark"]


NOWHERE = "has nowhere to write"


def test_a_log_handler_outside_any_session_says_so_once(tmp_path: Path) -> None:
    plain = _plain(tmp_path, LOGS)
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout == "ok\n"
    [line] = plain.stderr.splitlines()
    assert line.startswith("perfetto_client: PerfettoLogHandler has nowhere to write"), line
    assert "perfetto-trace run" in line


def test_a_span_processor_outside_any_session_says_so_once(tmp_path: Path) -> None:
    pytest.importorskip("opentelemetry.sdk")
    plain = _plain(tmp_path, SPANS)
    assert plain.returncode == 0, plain.stderr
    [line] = plain.stderr.splitlines()
    assert line.startswith("perfetto_client: PerfettoSpanProcessor has nowhere to write"), line


def test_a_program_that_set_up_tracing_hears_nothing(tmp_path: Path) -> None:
    # Tracing.initialize: the program means to start sessions (or traced does); not a mistake.
    plain = _plain(tmp_path, "import perfetto_client as pc\npc.Tracing.initialize()\n" + LOGS)
    assert plain.returncode == 0, plain.stderr
    assert plain.stderr == ""
