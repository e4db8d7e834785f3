#!/usr/bin/env python3
"""Builds the packages' sdists and wheels, and installs them into fresh virtual environments.

    python tools/dists.py build OUT [--source TREE]
        an sdist and a wheel (built from that sdist) of every package of TREE (default: this
        checkout) and of its build backend (perfetto-build) into OUT, each with the build
        backend its pyproject.toml declares, in the package graph's order
    python tools/dists.py venv VENV OUT DIST...
        a fresh virtual environment VENV with the distributions DIST installed, their perfetto
        siblings taken from OUT (third-party dependencies from the normal index)

`build` needs pypa/build in the running interpreter (the nox sessions install it). Each wheel is
built out of tree (perfetto_build), and `build` fails if one holds a compiled module of another
Python.
"""

from __future__ import annotations

import argparse
import email.parser
import re
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path
from typing import Any

from package_graph import build_backend, packages, requirement_name

ROOT = Path(__file__).resolve().parent.parent
DIST_PREFIX = "perfetto-"
EXTENSION = re.compile(r"\.(cpython-\d+\w*-[\w-]+|abi3)\.so$")
"""A compiled Python module's suffix (`.cpython-312-x86_64-linux-gnu.so`); a plain C library
(`lib*.so`) has none."""


def build(tree: Path, out: Path) -> list[Path]:
    """Builds the build backend and every package of `tree` into `out`, in the package graph's
    order; returns the wheels.

    The third-party build requirements every package declares are installed here once; the
    backend is built first and installed here from its wheel, with its requirements; each
    package builds here (one environment instead of two per package), and a package whose
    `.pxd` files a later one's build cimports (its build-system.requires names it) is
    installed here from its wheel, with its dependencies from `out`.
    """
    out.mkdir(parents=True, exist_ok=True)
    graph = packages(tree)
    backend = build_backend(tree)  # None in an older tree: each package carries its build.py
    requires = {
        r
        for package in graph
        for r in _build_requires(package.directory)
        if not requirement_name(r).startswith(DIST_PREFIX)  # ours, built here in turn
    }
    needed = {name for package in graph for name in package.build_requires}
    pip = [sys.executable, "-m", "pip", "install", "-q"]
    paths = [package.directory for package in graph]
    if backend is not None:
        paths.insert(0, backend)
        needed.add(requirement_name(_project(backend)["name"]))
    if requires:
        subprocess.run([*pip, *sorted(requires)], check=True)
    for path in paths:
        print(f"dists: building {path.relative_to(tree)}", flush=True)
        result = subprocess.run(
            [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(path)],
            check=False,
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            sys.stderr.write(result.stdout + result.stderr)
            raise SystemExit(f"dists: building {path.relative_to(tree)} failed")
        name = _project(path)["name"]
        if name in needed:
            pattern = name.replace("-", "_") + "-*.whl"
            wheel = max(out.glob(pattern), key=lambda w: w.stat().st_mtime)
            install = [*pip, "--find-links", str(out), "--force-reinstall", str(wheel)]
            subprocess.run(install, check=True)
    wheels = sorted(out.glob("*.whl"))
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    for wheel in wheels:
        foreign = [m for m in compiled_modules(wheel) if not m.endswith(suffix)]
        if foreign:
            raise SystemExit(f"dists: {wheel.name} holds other Pythons' modules: {foreign}")
    return wheels


def _project(directory: Path) -> dict[str, Any]:
    project: dict[str, Any] = _pyproject(directory)["project"]
    return project


def _build_requires(directory: Path) -> list[str]:
    requires: list[str] = _pyproject(directory)["build-system"]["requires"]
    return requires


def _pyproject(directory: Path) -> dict[str, Any]:
    return tomllib.loads((directory / "pyproject.toml").read_text())


def compiled_modules(wheel: Path) -> list[str]:
    """The compiled Python modules a wheel holds, by their path in it."""
    with zipfile.ZipFile(wheel) as archive:
        return sorted(n for n in archive.namelist() if EXTENSION.search(n))


def wheel_metadata(wheel: Path) -> email.message.Message:
    """The METADATA of a wheel."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        return email.parser.Parser().parsestr(archive.read(name).decode())


def make_venv(
    directory: Path, dists: Path, requirements: list[str], interpreter: str = sys.executable
) -> Path:
    """Creates a fresh venv of `interpreter` in `directory` and installs `requirements` into
    it; its python."""
    subprocess.run([interpreter, "-m", "venv", "--clear", str(directory)], check=True)
    python = directory / "bin" / "python"
    ours = {wheel_metadata(w)["Name"]: wheel_metadata(w)["Version"] for w in dists.glob("*.whl")}
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--find-links", str(dists), *requirements],
        check=True,
    )
    installed = installed_distributions(python)
    foreign = [
        f"{name} {version}"
        for name, version in installed.items()
        if name.startswith(DIST_PREFIX) and ours.get(name) != version
    ]
    if foreign:
        raise SystemExit(f"dists: installed perfetto packages not from {dists}: {foreign}")
    return python


def installed_distributions(python: Path) -> dict[str, str]:
    """Name -> version of every distribution installed in the environment of `python`."""
    script = (
        "import importlib.metadata as m\n"
        "for d in m.distributions(): print(d.metadata['Name'], d.version)\n"
    )
    output = subprocess.run(
        [str(python), "-c", script], check=True, capture_output=True, text=True
    ).stdout
    pairs = (line.split() for line in output.splitlines() if line.strip())
    return {name.lower().replace("_", "-"): version for name, version in pairs}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    build_cmd = commands.add_parser("build")
    build_cmd.add_argument("out", type=Path)
    build_cmd.add_argument("--source", type=Path, default=ROOT)
    venv_cmd = commands.add_parser("venv")
    venv_cmd.add_argument("venv", type=Path)
    venv_cmd.add_argument("dists", type=Path)
    venv_cmd.add_argument("requirements", nargs="+")
    args = parser.parse_args(argv)
    if args.command == "build":
        for wheel in build(args.source.resolve(), args.out.resolve()):
            print(wheel.name)
    else:
        print(make_venv(args.venv.resolve(), args.dists.resolve(), args.requirements))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
