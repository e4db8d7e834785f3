"""What `perfetto-trace run` loads before the program starts: none of the service stack.

Recording into a file needs the hook, the engine and the client library's encoders; the
tracing service, its IPC, shared memory, asyncio and protobuf load only for `--system`
(start-up cost, issues #23 and #30), the generated writers never; nor dataclasses (it loads
inspect) or json (#30), nor pathlib: a program that imports it would find it loaded, its
import missing from its trace.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace

PERFETTO_TRACE = str(Path(sys.executable).parent / "perfetto-trace")
NOT_FOR_A_FILE = (
    "asyncio",
    "ssl",
    "perfetto_service",
    "perfetto_smb",
    "perfetto_wire",
    "google.protobuf",
    "importlib.metadata",
    "dataclasses",
    "inspect",
    "json",
    "pathlib",
)


def loaded_modules(importtime_stderr: str) -> set[str]:
    """The modules `python -X importtime` says were imported."""
    return {
        line.rsplit("|", 1)[1].strip()
        for line in importtime_stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }


@pytest.mark.parametrize("options", [[], ["--ring", "4"], ["-m"]], ids=["file", "ring", "module"])
def test_recording_into_a_file_loads_no_service_stack(tmp_path: Path, options: list[str]) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "hello.py").write_text("print('hello')\n")
    program = ["hello"] if options == ["-m"] else ["hello.py"]
    done = subprocess.run(
        [sys.executable, "-X", "importtime", PERFETTO_TRACE, "run", *options, *program],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == "hello\n"
    trace = Trace.FromString((work / "trace.pftrace").read_bytes())
    assert any(p.HasField("track_descriptor") for p in trace.packet)
    loaded = loaded_modules(done.stderr)
    assert "perfetto_client._tracer._engine" in loaded
    heavy = sorted(m for m in loaded if m.split(".")[0] in NOT_FOR_A_FILE or m in NOT_FOR_A_FILE)
    assert heavy == []
    # Nor the generated writers (TracePacket's loads every message it may nest, the trace
    # config and stats included: more than the rest of perfetto-trace's start-up).
    generated = sorted(m for m in loaded if m.endswith(("_pbzero", "_pb2")))
    assert generated == []
