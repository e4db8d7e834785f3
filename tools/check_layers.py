#!/usr/bin/env python3
"""Fails if a package imports or cimports a sibling that the package graph does not put below it
(its `pyproject.toml` dependencies and theirs; tools/package_graph.py).

It reads the imports of every `.py` module (and its `cython.cimports.X` cimports) and the
`cimport X` / `from X cimport` lines of every `.pyx` and `.pxd` file.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

from package_graph import Package, closure, packages

ROOT = Path(__file__).resolve().parent.parent
GRAPH = packages(ROOT)

# import name -> source directory, bottom layer first.
SOURCES: dict[str, Path] = {p.import_name: p.directory / "src" / p.import_name for p in GRAPH}
_BY_DISTRIBUTION = {p.distribution: p for p in GRAPH}
_CIMPORT = re.compile(r"^[ \t]*(?:from[ \t]+([\w.]+)[ \t]+cimport\b|cimport[ \t]+([\w.]+))", re.M)
_PY_CIMPORT = "cython.cimports."


def allowed(package: str) -> set[str]:
    """The packages (import names) `package` may import: itself, its dependencies and
    everything they stand on."""
    node: Package = next(p for p in GRAPH if p.import_name == package)
    return {_BY_DISTRIBUTION[d].import_name for d in closure(node, GRAPH)}


def imported_packages(path: Path) -> set[tuple[str, int]]:
    """The (top-level project package, line) pairs that one module imports or cimports."""
    found: set[tuple[str, int]] = set()
    if path.suffix in {".pyx", ".pxd"}:
        text = path.read_text()
        for match in _CIMPORT.finditer(text):
            top = (match.group(1) or match.group(2)).split(".")[0]
            if top in SOURCES:
                found.add((top, text.count("\n", 0, match.start()) + 1))
        return found
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
            top = name.removeprefix(_PY_CIMPORT).split(".")[0]
            if top in SOURCES:
                found.add((top, node.lineno))
    return found


def violations() -> list[str]:
    """Every upward or sideways import in the packages' sources, as printable lines."""
    problems = []
    for package, src in SOURCES.items():
        ok = allowed(package)
        modules = sorted(p for p in src.rglob("*") if p.suffix in {".py", ".pyx", ".pxd"})
        for module in modules:
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
