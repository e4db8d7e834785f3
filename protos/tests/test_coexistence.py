"""Our generated modules and upstream's `perfetto` package import into one process.

Upstream's package registers `perfetto.protos.*` in protobuf's default pool; ours must not, or
the second import fails with "duplicate symbol". Each order runs in a fresh interpreter.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

OURS = """
import perfetto_service
from perfetto_protos.trace.trace_packet_pb2 import TracePacket
from perfetto_protos.common.builtin_clock_pb2 import BuiltinClock
"""
UPSTREAM = """
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as upstream
"""
USE_BOTH = """
ours = TracePacket(timestamp=5)
ours.for_testing.str = "both"
theirs = upstream.TracePacket.FromString(ours.SerializeToString())
assert theirs.timestamp == 5 and theirs.for_testing.str == "both"
assert BuiltinClock.Value("BUILTIN_CLOCK_BOOTTIME") == upstream.BUILTIN_CLOCK_BOOTTIME
print("ok")
"""


@pytest.mark.parametrize("upstream_first", [False, True], ids=["ours-first", "upstream-first"])
def test_both_packages_import_in_one_process(upstream_first: bool) -> None:
    imports = UPSTREAM + OURS if upstream_first else OURS + UPSTREAM
    result = subprocess.run(
        [sys.executable, "-c", imports + USE_BOTH],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
