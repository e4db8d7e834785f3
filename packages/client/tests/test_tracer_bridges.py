"""`perfetto-trace run --otel` and `--logging LEVEL` on untouched programs, from another
directory: spans and records land in the trace next to the calls."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from perfetto_protos.upstream import parse_upstream_trace
from tracer_support import HOOKS, client_events, decode, require_compiled_hook

TRACE = [sys.executable, "-m", "perfetto_client._tracer", "run"]

PROGRAM = """\
import logging
import sys

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
tracer = trace.get_tracer("shop")
log = logging.getLogger("shop")
log.setLevel(logging.INFO)


def reserve(item):
    with tracer.start_as_current_span("reserve", attributes={"item": item}):
        log.info("reserved %s", item)


def checkout():
    with tracer.start_as_current_span("checkout"):
        for item in ("book", "pen"):
            reserve(item)
        logging.warning("stock is low")


checkout()
print(len(exporter.get_finished_spans()), "spans")
"""


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize("hook", HOOKS)
def test_otel_and_logging_of_an_untouched_program(tmp_path: Path, hook: str) -> None:
    if hook == "compiled":
        require_compiled_hook()
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "shop.py").write_text(PROGRAM)
    out = tmp_path / "out" / "t.pftrace"
    out.parent.mkdir()
    pure = ["--pure"] if hook == "pure" else []
    plain = _run([sys.executable, "src/shop.py"], tmp_path)
    proc = _run(
        [*TRACE, *pure, "--otel", "--logging", "info", "-o", str(out), "src/shop.py"], tmp_path
    )
    assert proc.returncode == plain.returncode == 0, proc.stderr
    assert proc.stdout == plain.stdout == "3 spans\n"  # the program's own exporter as before
    assert plain.stderr == "WARNING:root:stock is low\n"  # logging.warning's basicConfig...
    assert proc.stderr.startswith(plain.stderr)  # ...still configures the root logger
    assert "0 lost" in proc.stderr

    client = client_events(out)
    slices = client.slices()
    spans = [(s.name, s.depth, s.args) for s in slices if s.categories == ["otel"]]
    assert spans == [
        ("checkout", 0, {}),
        ("reserve", 1, {"item": "book"}),
        ("reserve", 1, {"item": "pen"}),
    ]
    logs = [(e.log.body, e.log.prio, e.log.function) for e in client.events if e.log is not None]
    assert logs == [
        ("reserved book", 4, "reserve"),
        ("reserved pen", 4, "reserve"),
        ("stock is low", 5, "checkout"),
    ]
    # Spans sit under the thread whose calls perfetto-trace recorded, logs on its track.
    calls = decode(out)
    [main] = [t for t in calls.threads.values() if t.tid and "checkout" in t.names()]
    spans_track = client.tracks[slices[0].track]
    assert client.tracks[spans_track.parent_uuid].thread.tid == main.tid
    log_tracks = {client.tracks[e.track].thread.tid for e in client.events if e.log is not None}
    assert log_tracks == {main.tid}


def test_logging_level_filters_and_otel_without_the_sdk_fails_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "p.py").write_text("import logging\nlogging.warning('w')\nlogging.error('e')\n")
    out = tmp_path / "t.pftrace"
    proc = _run([*TRACE, "-q", "--logging", "ERROR", "-o", str(out), "p.py"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "WARNING:root:w\nERROR:root:e\n"  # as python prints them
    logs = [e.log.body for e in client_events(out).events if e.log is not None]
    assert logs == ["e"]

    bad = _run([*TRACE, "--logging", "LOUD", "p.py"], tmp_path)
    assert bad.returncode == 1
    assert bad.stderr.count("\n") == 1
    assert "--logging takes a level" in bad.stderr

    blocked = tmp_path / "blocked"
    blocked.mkdir()
    (blocked / "opentelemetry").mkdir()
    (blocked / "opentelemetry" / "__init__.py").write_text("raise ImportError('not installed')\n")
    env_path = f"{blocked}"
    no_sdk = subprocess.run(
        [*TRACE, "--otel", "p.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**__import__("os").environ, "PYTHONPATH": env_path},
    )
    assert no_sdk.returncode == 1
    assert no_sdk.stderr == (
        "perfetto-trace: --otel needs the OpenTelemetry SDK: pip install 'perfetto-client[otel]'\n"
    )


def test_the_summary_counts_the_programs_own_events_and_the_service_stays_quiet(
    tmp_path: Path,
) -> None:
    program = (
        "import logging\n"
        "logging.basicConfig(level=logging.INFO)\n"
        "for i in range(300):\n"
        "    logging.info('step %d', i)\n"
    )
    (tmp_path / "p.py").write_text(program)
    out = tmp_path / "t.pftrace"
    plain = _run([sys.executable, "p.py"], tmp_path)
    proc = _run([*TRACE, "--logging", "INFO", "-o", str(out), "p.py"], tmp_path)
    assert proc.returncode == plain.returncode == 0, proc.stderr
    # The program's INFO lines as without perfetto-trace, none of the in-process service's.
    assert proc.stderr.startswith(plain.stderr)
    assert proc.stderr.count("\n") == plain.stderr.count("\n") + 2  # the summary's two lines
    trace: Any = parse_upstream_trace(out.read_bytes())
    events = sum(1 for p in trace.packet if p.HasField("track_event"))
    assert len([e for e in client_events(out).events if e.log is not None]) == 300
    assert f" {events:,} events, 0 lost" in proc.stderr
