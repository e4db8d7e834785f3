"""Builds the stale compiled modules in a checkout and puts the test helpers on the path."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
BUILD_NATIVE = HERE.parents[2] / "tools" / "build_native.py"
sys.path.insert(0, str(HERE))


def pytest_sessionstart() -> None:
    if BUILD_NATIVE.is_file():  # in a checkout; installed code is tested as it is
        subprocess.run([sys.executable, str(BUILD_NATIVE)], check=True)
