"""Shared fixtures of the perfetto_protos tests."""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

import perfetto_protos
import pytest
from google.protobuf.descriptor import FileDescriptor


def _generated_modules() -> list[ModuleType]:
    names = sorted(
        info.name
        for info in pkgutil.walk_packages(perfetto_protos.__path__, "perfetto_protos.")
        if info.name.endswith("_pb2")
    )
    return [importlib.import_module(name) for name in names]


@pytest.fixture(scope="session")
def pb2_modules() -> list[ModuleType]:
    """Every generated `_pb2` module, imported."""
    return _generated_modules()


@pytest.fixture(scope="session")
def our_files(pb2_modules: list[ModuleType]) -> list[FileDescriptor]:
    """The file descriptor of every generated `_pb2` module."""
    files: list[FileDescriptor] = [module.DESCRIPTOR for module in pb2_modules]
    return files


def pytest_sessionstart(session: pytest.Session) -> None:
    """Stops the run if the build that loaded is not the one the environment asks for."""
    del session
    from protozero import _native

    error = _native.expectation_error("perfetto_protos")
    if error is not None:
        pytest.exit(f"perfetto_protos: {error}", returncode=1)
