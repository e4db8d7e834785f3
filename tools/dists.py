#!/usr/bin/env python3
"""Builds the packages' sdists and wheels, and installs them into fresh virtual environments.

    python tools/dists.py build OUT [--source TREE]
        an sdist and a wheel (built from that sdist) of every package of TREE (default: this
        checkout) into OUT, each with the build backend its pyproject.toml declares
    python tools/dists.py venv VENV OUT DIST...
        a fresh virtual environment VENV with the distributions DIST installed, their perfetto
        siblings taken from OUT (third-party dependencies from the normal index)

`build` needs pypa/build in the running interpreter (the nox sessions install it). Each wheel is
built out of tree (build.py), and `build` fails if one holds a compiled module of another Python.
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

ROOT = Path(__file__).resolve().parent.parent
DIST_PREFIX = "perfetto-"
CIMPORTED = ("perfetto-protozero", "perfetto-protos", "perfetto-smb")
"""The packages whose .pxd files other packages' compiled modules cimport at build time (and
perfetto-protos, a dependency of perfetto-smb), each built and installed, with its
dependencies, before the packages whose build requires it."""
EXTENSION = re.compile(r"\.(cpython-\d+\w*-[\w-]+|abi3)\.so$")
"""A compiled Python module's suffix (`.cpython-312-x86_64-linux-gnu.so`); a plain C library
(`lib*.so`) has none."""


def package_dirs(tree: Path) -> list[Path]:
    """The directories of `tree` holding a package (a pyproject.toml with a [project] table)."""
    candidates = [tree / "protos", *sorted((tree / "packages").iterdir())]
    return [
        path
        for path in candidates
        if (path / "pyproject.toml").is_file()
        and "project" in tomllib.loads((path / "pyproject.toml").read_text())
    ]


def build(tree: Path, out: Path) -> list[Path]:
    """Builds every package of `tree` into `out`; returns the wheels.

    The build requirements every package declares are installed once into the running
    environment, and each package builds there (one environment instead of two per package).
    """
    out.mkdir(parents=True, exist_ok=True)
    projects = {
        path: tomllib.loads((path / "pyproject.toml").read_text()) for path in package_dirs(tree)
    }
    requires = {
        r
        for project in projects.values()
        for r in project["build-system"]["requires"]
        if not r.startswith(DIST_PREFIX)  # the siblings, built and installed here in turn
    }
    # The cimported packages first, each installed here from its wheel: later builds cimport
    # their .pxd files.
    order = {name: i for i, name in enumerate(CIMPORTED)}
    packages = sorted(
        projects, key=lambda p: order.get(projects[p]["project"]["name"], len(CIMPORTED))
    )
    pip = [sys.executable, "-m", "pip", "install", "-q"]
    subprocess.run([*pip, *sorted(requires)], check=True)
    for path in packages:
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
        name = projects[path]["project"]["name"]
        if name in CIMPORTED:
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
