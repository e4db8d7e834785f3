"""`tools/dev.py`, the README's set-up commands, as a user runs them from elsewhere."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from perfetto_protos.upstream import parse_upstream_trace

ROOT = Path(__file__).resolve().parent.parent


def test_dev_trace_runs_the_program_where_the_caller_is(tmp_path: Path) -> None:
    (tmp_path / "prog.py").write_text("import os\ndef work():\n    print(os.getcwd())\nwork()\n")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "dev.py"), "trace", "prog.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == str(tmp_path)
    trace = tmp_path / "trace.pftrace"
    assert f"wrote {trace} (" in proc.stderr
    parsed: Any = parse_upstream_trace(trace.read_bytes())
    packets = parsed.packet
    names = {n.name for packet in packets for n in packet.interned_data.event_names}
    assert any(name.split(".")[-1] == "work" for name in names), names
    assert not (ROOT / "prog.py").exists()
