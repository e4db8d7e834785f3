"""`perfetto --help` and a mistyped flag answer before protobuf and the service load."""

from __future__ import annotations

import subprocess
import sys

import pytest
from cmdlib import BIN

NOT_FOR_HELP = ("asyncio", "google", "perfetto_protos", "perfetto_service", "protozero")


@pytest.mark.parametrize(
    ("args", "expected"),
    [(["--help"], "Usage: perfetto"), (["--no-such-flag"], "perfetto: ")],
)
def test_help_loads_no_session_machinery(tmp_path: object, args: list[str], expected: str) -> None:
    done = subprocess.run(
        [sys.executable, "-X", "importtime", str(BIN / "perfetto"), *args],
        cwd=str(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    lines = done.stderr.splitlines()
    assert any(expected in line for line in lines if not line.startswith("import time:"))
    loaded = {line.rsplit("|", 1)[1].strip() for line in lines if line.startswith("import time:")}
    assert "perfetto_cmd._options" in loaded
    assert sorted(m for m in loaded if m.split(".")[0] in NOT_FOR_HELP) == []
