"""The ranges on perfetto-service that this checkout's packages declare admit every version
of it that the kit combines: an install may pick any of them, and the kit proves they work."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from kit import versions
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
DEPENDENTS = sorted(
    path
    for path in ROOT.glob("packages/*/pyproject.toml")
    if any(
        Requirement(spec).name == "perfetto-service"
        for spec in tomllib.loads(path.read_text())["project"].get("dependencies", [])
    )
)


@pytest.mark.parametrize("pyproject", DEPENDENTS, ids=lambda p: p.parent.name)
def test_the_declared_service_range_admits_every_version_tested(pyproject: Path) -> None:
    dependencies = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    service = next(Requirement(s) for s in dependencies if s.startswith("perfetto-service"))
    for version in versions():
        assert Version(version.traits["service"]) in service.specifier, version
