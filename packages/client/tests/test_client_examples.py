"""The client's examples run and write the traces they describe."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from trace_model import TraceModel

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def run_example(name: str, out: Path) -> str:
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / name), str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_track_events_example(tmp_path: Path) -> None:
    out = tmp_path / "t.pftrace"
    assert "wrote" in run_example("track_events.py", out)
    trace = TraceModel(out.read_bytes())
    names = [s.name for s in trace.slices()]
    assert names.count("frame") == 5
    assert names.count("draw_layer") == 15
    assert {"fetch", "queued", "poll a", "poll b"} <= set(names)
    assert trace.counters("frames drawn") == [1, 2, 3, 4, 5]
    assert "network worker" in trace.thread_names().values()


def test_custom_data_source_example(tmp_path: Path) -> None:
    out = tmp_path / "c.pftrace"
    output = run_example("custom_data_source.py", out)
    assert "temperature source started" in output
    trace = TraceModel(out.read_bytes()).trace
    texts = [p.for_testing.str for p in trace.packet if p.HasField("for_testing")]
    assert texts == ["temperature 20.5", "temperature 21.0", "temperature 21.7"]
