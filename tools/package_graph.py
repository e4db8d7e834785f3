"""The monorepo's packages and how they depend on each other, read from where they are declared.

The package list is the root `pyproject.toml`'s path dependencies (what poetry installs in
develop mode); the edges are each package's own `pyproject.toml`: `[project] dependencies`
(what pip installs with it) and the siblings its `[build-system] requires` (whose `.pxd` files
its compiled modules cimport). The build backend every compiled package names is the root's
`[tool.perfetto] build-backend` directory. Every tool (nox, dev.py, the layer check, dists,
install_check, build_native) and the repository tests read this module; see docs/native.md.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
_NAME = re.compile(r"[A-Za-z0-9._-]+")


@dataclass(frozen=True)
class Package:
    """One package of the monorepo, as its `pyproject.toml` declares it."""

    name: str
    """Its directory's name, which nox sessions use (`smb`, `protos`)."""
    directory: Path
    distribution: str
    version: str
    import_name: str
    dependencies: dict[str, str]
    """Each sibling distribution it depends on at run time, with its requirement."""
    build_requires: dict[str, str]
    """Each sibling distribution its build needs installed (it cimports its `.pxd` files)."""
    scripts: tuple[str, ...]


def requirement_name(requirement: str) -> str:
    """The normalised distribution name a requirement names (`perfetto-smb==0.1.0`)."""
    match = _NAME.match(requirement)
    assert match is not None, requirement
    return match.group().lower().replace("_", "-")


def _root(root: Path) -> dict[str, Any]:
    return tomllib.loads((root / "pyproject.toml").read_text())


def package_directories(root: Path = ROOT) -> list[Path]:
    """The packages' directories, as the root `pyproject.toml` lists them."""
    declared = _root(root)["tool"]["poetry"]["dependencies"]
    return [root / spec["path"] for spec in declared.values() if isinstance(spec, dict)]


def read_package(directory: Path) -> Package:
    """The package in `directory`, from its `pyproject.toml`."""
    data = tomllib.loads((directory / "pyproject.toml").read_text())
    project = data["project"]
    ours = re.compile(r"perfetto-(?!build\b)")  # siblings; perfetto-build is the backend

    def siblings(requirements: list[str]) -> dict[str, str]:
        named = {requirement_name(r): r for r in requirements}
        return {name: r for name, r in named.items() if ours.match(name)}

    return Package(
        name=directory.name,
        directory=directory,
        distribution=project["name"],
        version=project["version"],
        import_name=data["tool"]["poetry"]["packages"][0]["include"],
        dependencies=siblings(project.get("dependencies", [])),
        build_requires=siblings(data["build-system"]["requires"]),
        scripts=tuple(project.get("scripts", {})),
    )


def packages(root: Path = ROOT) -> list[Package]:
    """Every package, each after the siblings it depends on or builds against (the root's
    order among those that do not)."""
    found = {p.distribution: p for p in map(read_package, package_directories(root))}
    ordered: list[Package] = []
    visiting: list[str] = []

    def visit(name: str) -> None:
        if any(p.distribution == name for p in ordered):
            return
        if name in visiting:
            raise ValueError(f"package graph: a cycle through {' -> '.join([*visiting, name])}")
        if name not in found:
            raise ValueError(f"package graph: {visiting[-1]} needs {name}, which is not listed")
        visiting.append(name)
        package = found[name]
        for dep in [*package.dependencies, *package.build_requires]:
            visit(dep)
        visiting.pop()
        ordered.append(package)

    for name in found:
        visit(name)
    return ordered


def build_backend(root: Path = ROOT) -> Path | None:
    """The directory of the build backend the compiled packages name (None in a tree that has
    none: an older version's)."""
    tool = _root(root)["tool"]
    directory = tool.get("perfetto", {}).get("build-backend")
    return root / directory if directory else None


def support_package(root: Path = ROOT) -> Path:
    """The directory of the package every package's tests share (the root's
    `[tool.perfetto] test-support`)."""
    directory: str = _root(root)["tool"]["perfetto"]["test-support"]
    return root / directory


def closure(package: Package, graph: list[Package]) -> set[str]:
    """The distributions `package` may use: itself, its dependencies and theirs."""
    by_name = {p.distribution: p for p in graph}
    seen: set[str] = set()
    stack = [package.distribution]
    while stack:
        name = stack.pop()
        if name not in seen:
            seen.add(name)
            stack.extend(by_name[name].dependencies)
    return seen
