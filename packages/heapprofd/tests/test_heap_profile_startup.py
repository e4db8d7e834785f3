"""heap_profile starts `traced` and the daemon as forks of itself, not as new interpreters.

An interpreter of their own would load the service stack again (asyncio, protobuf, the IPC
layer): most of heap_profile's start-up cost (issue #23). The program itself keeps a fresh
interpreter (`heapprofd run`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

# Run by heap_profile: the command lines of heap_profile and of its other children.
PROBE = """
import json, os, sys

def cmdline(pid):
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return [a.decode() for a in f.read().split(b"\\0") if a]

parent = os.getppid()
with open(f"/proc/{parent}/task/{parent}/children") as f:
    siblings = [int(p) for p in f.read().split() if int(p) != os.getpid()]
json.dump({"parent": cmdline(parent), "siblings": [cmdline(p) for p in siblings],
           "self": cmdline(os.getpid())}, open(sys.argv[1], "w"))
"""


def test_the_daemons_are_forks_of_heap_profile(tmp_path: Path) -> None:
    (tmp_path / "probe.py").write_text(PROBE)
    env = dict(os.environ)
    env["PERFETTO_CONSUMER_SOCK_NAME"] = str(tmp_path / "no-traced-here")
    env.pop("PERFETTO_PRODUCER_SOCK_NAME", None)
    env.pop("PERFETTO_HEAPPROFD_SOCK_NAME", None)
    heap_profile = str(Path(sys.executable).with_name("heap_profile"))
    done = subprocess.run(
        [heap_profile, "-o", "out.pftrace", "--", "probe.py", "seen.json"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out.pftrace").stat().st_size > 0
    seen = json.loads((tmp_path / "seen.json").read_text())
    assert seen["self"][-3:] == ["--", "probe.py", "seen.json"]
    assert len(seen["siblings"]) == 2  # traced and the heapprofd daemon
    assert all(cmdline == seen["parent"] for cmdline in seen["siblings"]), seen
