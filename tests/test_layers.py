"""The layering check passes on the tree and catches an upward import or cimport."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def _checker() -> Any:
    sys.path.insert(0, str(ROOT / "tools"))  # where check_layers finds package_graph
    spec = importlib.util.spec_from_file_location("check_layers", ROOT / "tools/check_layers.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["check_layers"] = module
    spec.loader.exec_module(module)
    return module


def test_tree_has_no_layer_violation() -> None:
    assert _checker().violations() == []


def test_upward_and_sideways_imports_are_reported(tmp_path: Path) -> None:
    checker = _checker()
    fake = tmp_path / "perfetto_smb"
    fake.mkdir()
    (fake / "bad.py").write_text(
        "import perfetto_service\nfrom perfetto_wire import x\nimport protozero\nimport os\n"
    )
    checker.SOURCES = {**checker.SOURCES, "perfetto_smb": fake}
    checker.ROOT = tmp_path
    problems = checker.violations()
    assert problems == [
        "perfetto_smb/bad.py:1: perfetto_smb may not import perfetto_service",
        "perfetto_smb/bad.py:2: perfetto_smb may not import perfetto_wire",
    ]


def test_cimports_of_a_package_above_are_reported(tmp_path: Path) -> None:
    checker = _checker()
    fake = tmp_path / "perfetto_smb"
    fake.mkdir()
    (fake / "_hook.pyx").write_text("# cython: language_level=3\ncimport perfetto_service.x\n")
    (fake / "_writer.pxd").write_text(
        "from protozero._message cimport Message\nfrom perfetto_client._sink cimport f\n"
    )
    (fake / "_writer.py").write_text(
        "import cython\nif cython.compiled:\n"
        "    from cython.cimports.perfetto_wire._frame import g\n"
    )
    checker.SOURCES = {**checker.SOURCES, "perfetto_smb": fake}
    checker.ROOT = tmp_path
    assert checker.violations() == [
        "perfetto_smb/_hook.pyx:2: perfetto_smb may not import perfetto_service",
        "perfetto_smb/_writer.pxd:2: perfetto_smb may not import perfetto_client",
        "perfetto_smb/_writer.py:3: perfetto_smb may not import perfetto_wire",
    ]


def test_allowed_set_is_the_transitive_closure_of_the_declared_dependencies() -> None:
    checker = _checker()
    assert checker.allowed("perfetto_service") == {
        "perfetto_service",
        "perfetto_wire",
        "perfetto_smb",
        "perfetto_probes",
        "perfetto_protos",
        "protozero",
    }
    assert "perfetto_client" not in checker.allowed("perfetto_cmd")
