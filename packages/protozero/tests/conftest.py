"""Shared fixtures: the test schema compiled by protoc, loaded as protobuf classes."""

from __future__ import annotations

import importlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="session")
def descriptor_set_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A FileDescriptorSet of tests/data/pztest.proto and its imports, built by protoc."""
    out = tmp_path_factory.mktemp("descriptors") / "pztest.pb"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{DATA}",
            "--include_imports",
            f"--descriptor_set_out={out}",
            str(DATA / "pztest.proto"),
        ],
        check=True,
        timeout=120,
    )
    return out


@pytest.fixture(scope="session")
def pb(descriptor_set_path: Path) -> dict[str, Any]:
    """protobuf (upb) message classes of the test schema, by full name (e.g. pztest.EveryField)."""
    fds = descriptor_pb2.FileDescriptorSet.FromString(descriptor_set_path.read_bytes())
    pool = descriptor_pool.DescriptorPool()
    for file_proto in fds.file:
        pool.Add(file_proto)
    classes: dict[str, Any] = {}
    for file_proto in fds.file:
        prefix = file_proto.package
        stack = [(f"{prefix}.{m.name}", m) for m in file_proto.message_type]
        while stack:
            name, msg = stack.pop()
            classes[name] = message_factory.GetMessageClass(pool.FindMessageTypeByName(name))
            stack.extend((f"{name}.{n.name}", n) for n in msg.nested_type)
    return classes


@pytest.fixture(scope="session")
def generated(descriptor_set_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The test schema run through `python -m protozero.codegen` into package `pzgen`.

    Returns the directory to put on sys.path; the modules are `pzgen.pztest_pbzero` (with a
    `.pxd`: the form of a compiled module, here uncompiled) and `pzgen.pztest_other_pbzero`.
    """
    root = tmp_path_factory.mktemp("generated")
    out = root / "pzgen"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "protozero.codegen",
            str(descriptor_set_path),
            str(out),
            "--package",
            "pzgen",
            "--compiled",
            "pztest.*",
        ],
        check=True,
        timeout=120,
    )
    (out / "__init__.py").write_text('"""Generated test package."""\n')
    return root


@pytest.fixture(scope="session")
def pbzero(generated: Path) -> Iterator[ModuleType]:
    """The generated writer module of tests/data/pztest.proto, imported."""
    sys.path.insert(0, str(generated))
    try:
        yield importlib.import_module("pzgen.pztest_pbzero")
    finally:
        sys.path.remove(str(generated))


def pytest_sessionstart(session: pytest.Session) -> None:
    """Stops the run if the build that loaded is not the one the environment asks for."""
    del session
    from protozero import _native

    error = _native.expectation_error("protozero")
    if error is not None:
        pytest.exit(f"protozero: {error}", returncode=1)
