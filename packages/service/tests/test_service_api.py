"""The package's public surface: every exported name resolves, and importing is cheap."""

from __future__ import annotations

import subprocess
import sys

import perfetto_service


def test_every_exported_name_resolves() -> None:
    for name in perfetto_service.__all__:
        assert getattr(perfetto_service, name) is not None, name
    assert perfetto_service.__version__.startswith("0.")


def test_unknown_names_are_attribute_errors() -> None:
    assert not hasattr(perfetto_service, "TraceBuffer")  # private: perfetto_service.core


def test_import_loads_nothing_a_program_did_not_ask_for() -> None:
    # Costs are measured by benchmarks/bench_import.py; this checks the cause: no protobuf,
    # no asyncio, no sibling package until a name that needs them is used.
    code = (
        "import sys, perfetto_service\n"
        "heavy = ('google.protobuf', 'asyncio', 'perfetto_smb', 'perfetto_wire', "
        "'perfetto_protos', 'importlib.metadata')\n"
        "print(sorted(m for m in sys.modules if m.startswith(heavy)))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == "[]"


def test_base_callbacks_only_need_the_interfaces() -> None:
    code = (
        "import sys\n"
        "from perfetto_service import Consumer, Producer\n"
        "heavy = ('google.protobuf', 'perfetto_smb')\n"
        "print(sorted(m for m in sys.modules if m.startswith(heavy)))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == "[]"
