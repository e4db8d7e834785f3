"""The runnable examples under examples/ record the traces they promise."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from perfetto_protos.upstream import parse_upstream_trace

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_service_producer_consumer_records_its_ten_events(tmp_path: Path) -> None:
    out = tmp_path / "trace.pftrace"
    script = EXAMPLES / "service_producer_consumer.py"
    subprocess.run([sys.executable, str(script), str(out)], check=True, timeout=120)
    trace: Any = parse_upstream_trace(out.read_bytes())
    events = [p.for_testing for p in trace.packet if p.HasField("for_testing")]
    assert [(e.seq_value, e.str) for e in events] == [(n, f"event {n}") for n in range(10)]
