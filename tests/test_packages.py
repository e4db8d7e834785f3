"""Every package installs with its metadata, typing marker and public surface."""

from __future__ import annotations

import importlib
import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {
    "protozero": ("packages/protozero", "perfetto-protozero", "ProtozeroError"),
    "perfetto_protos": ("protos", "perfetto-protos", "ProtosError"),
    "perfetto_wire": ("packages/wire", "perfetto-wire", "WireError"),
    "perfetto_smb": ("packages/smb", "perfetto-smb", "SmbError"),
    "perfetto_service": ("packages/service", "perfetto-service", "ServiceError"),
    "perfetto_client": ("packages/client", "perfetto-client", "TracingError"),
    "perfetto_cmd": ("packages/cli", "perfetto-cmd", "CliError"),
    "heapprofd": ("packages/heapprofd", "perfetto-heapprofd", "HeapprofdError"),
}


@pytest.mark.parametrize("import_name", sorted(PACKAGES))
def test_package_is_installed_with_its_declared_version(import_name: str) -> None:
    directory, dist, _ = PACKAGES[import_name]
    declared = tomllib.loads((ROOT / directory / "pyproject.toml").read_text())["project"]
    assert declared["name"] == dist
    module = importlib.import_module(import_name)
    assert module.__version__ == version(dist) == declared["version"]


@pytest.mark.parametrize("import_name", sorted(PACKAGES))
def test_package_ships_py_typed_and_exports_what_all_names(import_name: str) -> None:
    directory, _, root_error = PACKAGES[import_name]
    assert (ROOT / directory / "src" / import_name / "py.typed").is_file()
    module = importlib.import_module(import_name)
    missing = [name for name in module.__all__ if not hasattr(module, name)]
    assert missing == []
    error = getattr(module, root_error)
    assert issubclass(error, Exception)
    assert root_error in module.__all__


@pytest.mark.parametrize("import_name", sorted(PACKAGES))
def test_every_error_a_package_defines_derives_from_its_root_error(import_name: str) -> None:
    module = importlib.import_module(import_name)
    root = getattr(module, PACKAGES[import_name][2])
    errors = [
        obj
        for name in module.__all__
        if isinstance(obj := getattr(module, name), type) and issubclass(obj, Exception)
    ]
    assert all(issubclass(error, root) for error in errors)
