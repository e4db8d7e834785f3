#!/usr/bin/env python3
"""Fails if a package imports a sibling that the layer table (README.md, "Layers") does not put
below it."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# import name -> source directory, bottom layer first.
SOURCES: dict[str, Path] = {
    "protozero": ROOT / "packages/protozero/src/protozero",
    "perfetto_protos": ROOT / "protos/src/perfetto_protos",
    "perfetto_wire": ROOT / "packages/wire/src/perfetto_wire",
    "perfetto_smb": ROOT / "packages/smb/src/perfetto_smb",
    "perfetto_service": ROOT / "packages/service/src/perfetto_service",
    "perfetto_client": ROOT / "packages/client/src/perfetto_client",
    "perfetto_cmd": ROOT / "packages/cli/src/perfetto_cmd",
    "heapprofd": ROOT / "packages/heapprofd/src/heapprofd",
}

# Direct dependencies of each package.
DIRECT: dict[str, set[str]] = {
    "protozero": set(),
    "perfetto_protos": {"protozero"},
    "perfetto_wire": {"perfetto_protos"},
    "perfetto_smb": {"perfetto_protos", "protozero"},
    "perfetto_service": {"perfetto_wire", "perfetto_smb"},
    "perfetto_client": {"perfetto_service"},
    "perfetto_cmd": {"perfetto_service"},
    "heapprofd": {"perfetto_service", "perfetto_smb"},
}


def allowed(package: str) -> set[str]:
    """The packages `package` may import: its dependencies and everything they stand on."""
    seen: set[str] = set()
    stack = list(DIRECT[package])
    while stack:
        dep = stack.pop()
        if dep not in seen:
            seen.add(dep)
            stack.extend(DIRECT[dep])
    return seen | {package}


def imported_packages(path: Path) -> set[tuple[str, int]]:
    """The (top-level project package, line) pairs that one module imports."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[tuple[str, int]] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            if top in SOURCES:
                found.add((top, node.lineno))
    return found


def violations() -> list[str]:
    """Every upward or sideways import in the packages' sources, as printable lines."""
    problems = []
    for package, src in SOURCES.items():
        ok = allowed(package)
        for module in sorted(src.rglob("*.py")):
            for top, line in sorted(imported_packages(module)):
                if top not in ok:
                    rel = module.relative_to(ROOT)
                    problems.append(f"{rel}:{line}: {package} may not import {top}")
    return problems


def main() -> int:
    problems = violations()
    for problem in problems:
        print(problem)
    print(f"layers: {len(problems)} violation(s) in {len(SOURCES)} packages")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
