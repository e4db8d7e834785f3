"""The compiled and the pure page parser write the same bytes for the same pages."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ftrace_testlib import SCHED_EVENTS, PingPong, capture, parse_capture, read_packet
from protozero import _native

HERE = Path(__file__).resolve().parent
GENERIC = "sched/sched_stat_runtime"  # no typed message: written as a generic event

_PURE_PARSE = """
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from protozero import _native
from ftrace_testlib import parse_capture
assert not _native.compiled_modules("perfetto_probes").get("perfetto_probes.ftrace._page_parser")
directory = Path(sys.argv[2])
for compact in (False, True):
    (directory / f"pure-{compact}.bin").write_bytes(b"".join(parse_capture(directory, compact)))
"""


def test_the_pure_build_writes_the_compiled_builds_bytes(tmp_path: Path) -> None:
    capture(
        tmp_path,
        [*SCHED_EVENTS, "task/task_newtask", "sched/sched_process_exit", GENERIC],
        PingPong(300).run,
    )
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PERFETTO_PY_")}
    subprocess.run(
        [sys.executable, "-c", _PURE_PARSE, str(HERE), str(tmp_path)],
        env={**clean, _native.PURE_ENV: "1"},
        check=True,
        timeout=300,
    )
    kinds = {
        e.WhichOneof("event")
        for p in map(read_packet, parse_capture(tmp_path, False))
        for e in p.ftrace_events.event
    }
    assert {"sched_switch", "sched_waking", "generic"} <= kinds
    for compact in (False, True):
        ours = b"".join(parse_capture(tmp_path, compact))
        assert len(ours) > 10_000
        assert ours == (tmp_path / f"pure-{compact}.bin").read_bytes()
