#!/usr/bin/env python3
"""Builds every package's compiled modules in place (the `.so` beside the `.py` in `src/`).

    python3 tools/build_native.py [--force] [PACKAGE_DIR...]

Each package with compiled modules (a `.pxd` beside the `.py`, or a `.pyx`) has a `build.py`,
identical in every package, that the build backend also runs on `pip install`. This runs it
for the packages whose `.so` files for the running interpreter are missing or older than their
`.py`/`.pxd`/`.pyx` (a no-op when all are up to date). Run it with each Python version in use:
the `.so` files carry the version in their name and coexist. The build must succeed:
PERFETTO_PY_EXPECT_COMPILED=1 is set for it. Given package directories (`packages/client`), it
builds those only. See docs/native.md.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import sysconfig
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
CANONICAL_BUILD = ROOT / "packages" / "protozero" / "build.py"
EXT_SUFFIX = sysconfig.get_config_var("EXT_SUFFIX")
"""The running interpreter's: the builds of other Python versions beside it are not looked at."""


def native_packages() -> list[Path]:
    """The package directories that have compiled modules."""
    dirs = sorted(
        p.parent for p in [*ROOT.glob("protos/build.py"), *ROOT.glob("packages/*/build.py")]
    )
    return [d for d in dirs if any((d / "src").rglob("*.pxd")) or any((d / "src").rglob("*.pyx"))]


def build_script(package: Path) -> ModuleType:
    """`package`'s `build.py`, imported."""
    spec = importlib.util.spec_from_file_location(f"_build_{package.name}", package / "build.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def include_path(package: Path) -> list[Path]:
    """Where `package`'s build finds `.pxd` files: its `src/` and the packages it cimports."""
    path: list[Path] = build_script(package).include_path(package / "src")
    return path


def compiled_module_names(package: Path) -> list[str]:
    """The dotted names of the modules `package`'s build compiles, on every Python version
    (none without a `build.py`)."""
    if not (package / "build.py").is_file():
        return []
    script, source = build_script(package), package / "src"
    return [script.module_name(p, source) for p in script.compiled_sources(source)]


def stale_modules(package: Path) -> list[Path]:
    """The modules of `package` whose compiled form is missing or older than its sources
    (its `.py`, the `.pxd` files of its own and of the packages it cimports, `build.py`)."""
    declarations = sorted((package / "src").rglob("*.pxd"))
    cimported = [p for d in include_path(package) for p in sorted(d.rglob("*.pxd"))]
    headers = sorted((package / "src").rglob("*.h"))
    shared = max(p.stat().st_mtime for p in [package / "build.py", *cimported, *headers])
    modules = [pxd.with_suffix(".py") for pxd in declarations]  # .pxd alone: C declarations
    modules += (package / "src").rglob("*.pyx")
    modules += (package / "src").rglob("lib*.c")  # shared libraries: lib*.so
    stale = []
    for source in sorted(modules):
        if not source.is_file():
            continue
        suffix = ".so" if source.suffix == ".c" else EXT_SUFFIX
        built = list(source.parent.glob(source.stem + suffix))
        newest_input = max(shared, source.stat().st_mtime)
        if not built or min(b.stat().st_mtime for b in built) < newest_input:
            stale.append(source)
    return stale


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--force", action="store_true", help="rebuild even if up to date")
    parser.add_argument("packages", nargs="*", type=Path, help="only these (default: all)")
    args = parser.parse_args(argv)
    canonical = CANONICAL_BUILD.read_bytes()
    chosen = {(ROOT / p).resolve() for p in args.packages}
    for package in native_packages():
        if chosen and package not in chosen:
            continue
        build_script = package / "build.py"
        if build_script.read_bytes() != canonical:
            rel = build_script.relative_to(ROOT)
            print(f"build_native: {rel} differs from {CANONICAL_BUILD.relative_to(ROOT)}")
            return 1
        if not args.force and not stale_modules(package):
            continue
        print(f"build_native: compiling {package.name}", flush=True)
        env = {**os.environ, "PERFETTO_PY_EXPECT_COMPILED": "1"}
        result = subprocess.run([sys.executable, str(build_script)], env=env, check=False)
        if result.returncode != 0:
            return result.returncode
    return 0


if __name__ == "__main__":
    sys.exit(main())
