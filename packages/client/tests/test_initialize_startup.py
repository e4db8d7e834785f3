"""What `import perfetto_client` and `Tracing.initialize(IN_PROCESS)` load: none of the service.

The in-process service (asyncio, protobuf, shared memory, the service core) and its thread
start with the first session, not with `initialize` (start-up cost, issue #20).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace

NOT_BEFORE_A_SESSION = (
    "asyncio",
    "ssl",
    "google.protobuf",
    "perfetto_protos",
    "perfetto_service",
    "perfetto_smb",
    "perfetto_wire",
    "importlib.metadata",
)

PROGRAM = """
import json, sys, threading
import perfetto_client as pc

CAT = pc.Category("app")
pc.Tracing.initialize(pc.Backend.IN_PROCESS)
pc.instant(CAT, "before any session")
report = {
    "modules": sorted(sys.modules),
    "threads": sorted(t.name for t in threading.enumerate()),
}
session = pc.Tracing.new_trace()
session.setup({"buffers": [{"size_kb": 1024}]})
session.start()
pc.instant(CAT, "in the session")
session.stop()
with open(sys.argv[1], "wb") as out:
    out.write(session.read_trace())
session.close()
report["threads_after"] = sorted(t.name for t in threading.enumerate())
print(json.dumps(report))
"""


def heavy(modules: list[str]) -> list[str]:
    """The modules of `modules` that belong to the service stack, protobuf or asyncio."""
    return [
        name
        for name in modules
        if any(name == root or name.startswith(root + ".") for root in NOT_BEFORE_A_SESSION)
    ]


def test_initialize_in_process_starts_nothing_until_a_session(tmp_path: Path) -> None:
    trace_path = tmp_path / "app.pftrace"
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM, str(trace_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert heavy(report["modules"]) == []
    assert report["threads"] == ["MainThread"]
    assert "perfetto-service" in report["threads_after"]
    trace = Trace.FromString(trace_path.read_bytes())
    names = {
        entry.name
        for packet in trace.packet
        if packet.HasField("interned_data")
        for entry in packet.interned_data.event_names
    }
    assert "in the session" in names
    assert "before any session" not in names
