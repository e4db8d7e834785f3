"""Builds the compiled client once per session and puts the test helpers on the path."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def _build() -> None:
    spec = importlib.util.spec_from_file_location(
        "heapprofd_build_ext", HERE.parent / "build_ext.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.build()


_build()
