#!/usr/bin/env python3
"""Builds every package's compiled modules in place (the `.so` beside the `.py` in `src/`).

    python3 tools/build_native.py [--force] [PACKAGE_DIR...]

Each package with compiled modules (a `.pxd` beside the `.py`, a `.pyx`, a `lib*.c`) names the
build backend perfetto_build (tools/perfetto-build), which the develop install and `pip install`
run. This runs it, in the package graph's order, for the packages whose modules for the running
interpreter are missing or were built from other sources than the checkout's: the record
perfetto_build writes beside them holds a hash of every file each was built from (its source,
what it includes, the `.pxd` files it cimports, the package's headers, the backend), so a
no-op when all are up to date. Run it with each Python version in use: the `.so` files carry
the version in their name and coexist. The build must succeed: PERFETTO_PY_EXPECT_COMPILED=1
is set for it. An optional module (`# build: optional`) that could not be built counts as not built:
each run tries it again. Given package directories (`packages/client`), it builds those only.
See docs/native.md.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from package_graph import Package, build_backend, packages

ROOT = Path(__file__).resolve().parent.parent


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def backend(root: Path = ROOT) -> ModuleType:
    """The tree's build backend, perfetto_build, loaded from its file."""
    directory = build_backend(root)
    assert directory is not None
    return _load("perfetto_build", directory / "perfetto_build.py")


def native(root: Path = ROOT) -> ModuleType:
    """protozero's `_native` (which reads the records), loaded from its file: importing
    protozero would refuse a stale protozero before it could be rebuilt."""
    return _load("_native", root / "packages" / "protozero" / "src" / "protozero" / "_native.py")


def compiled_module_names(package: Path) -> list[str]:
    """The dotted names of the modules `package`'s build compiles, on every Python version."""
    build, source = backend(), package / "src"
    return [build.module_name(p, source) for p in build.compiled_sources(source)]


def stale_reason(package: Package) -> str | None:
    """Why `package`'s modules for this interpreter must be built, or None if they are current."""
    build, record_reader = backend(), native()
    source = package.directory / "src"
    modules = [*build.compiled_sources(source), *build.shared_libraries(source)]
    if not modules:
        return None
    directory = source / package.import_name
    record = record_reader.read_record(str(directory))
    if record is None:
        return "never built"
    wanted = {build.module_name(m, source) for m in modules}
    if set(record) != wanted:
        return f"its modules changed: {', '.join(sorted(set(record) ^ wanted))}"
    # An optional module the last build could not compile (a library missing then) is tried
    # again: the library may have been installed since.
    missing = [m for m in modules if not build.built_file(m).is_file()]
    if missing:
        return f"not built: {', '.join(build.module_name(m, source) for m in missing)}"
    changed = [
        module
        for module, (_, inputs) in record.items()
        if any(record_reader.input_changed(entry, {}) for entry in inputs)
    ]
    return f"sources changed: {', '.join(changed)}" if changed else None


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--force", action="store_true", help="rebuild even if up to date")
    parser.add_argument("packages", nargs="*", type=Path, help="only these (default: all)")
    args = parser.parse_args(argv)
    chosen = {(ROOT / p).resolve() for p in args.packages}
    build = backend()
    for package in packages(ROOT):
        if chosen and package.directory.resolve() not in chosen:
            continue
        source = package.directory / "src"
        if not any(f(source) for f in (build.compiled_sources, build.shared_libraries)):
            continue
        reason = "--force" if args.force else stale_reason(package)
        if reason is None:
            continue
        print(f"build_native: compiling {package.name} ({reason})", flush=True)
        env = {**os.environ, "PERFETTO_PY_EXPECT_COMPILED": "1"}
        result = subprocess.run(
            [sys.executable, str(build.__file__)], cwd=package.directory, env=env, check=False
        )
        if result.returncode != 0:
            return result.returncode
    return 0


if __name__ == "__main__":
    sys.exit(main())
