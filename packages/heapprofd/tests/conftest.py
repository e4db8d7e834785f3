"""Builds the stale compiled modules in a checkout."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BUILD_NATIVE = Path(__file__).resolve().parents[3] / "tools" / "build_native.py"


def pytest_sessionstart(session: pytest.Session) -> None:
    # In a checkout (installed code is tested as it is); by xdist's controller, not its workers.
    if BUILD_NATIVE.is_file() and not hasattr(session.config, "workerinput"):
        subprocess.run([sys.executable, str(BUILD_NATIVE)], check=True)
