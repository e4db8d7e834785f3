"""The package's public surface: every exported name resolves, and importing is cheap."""

from __future__ import annotations

import subprocess
import sys

import perfetto_wire


def test_every_exported_name_resolves() -> None:
    for name in perfetto_wire.__all__:
        assert getattr(perfetto_wire, name) is not None, name


def test_import_loads_no_protobuf_until_a_name_needs_it() -> None:
    code = (
        "import sys, perfetto_wire\n"
        "print(sorted(m for m in sys.modules if m.startswith(('google.protobuf', 'asyncio'))))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == "[]"
