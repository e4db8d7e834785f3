#!/usr/bin/env python3
"""Builds protozero compiled with mypyc into a directory to put first on PYTHONPATH.

    python tools/build_mypyc.py OUT_DIR [EXTRA_MODULE.py ...]

Copies packages/protozero/src/protozero to OUT_DIR/protozero and compiles its hot modules in
place (the `.so` files sit next to the `.py` files, and Python prefers them). EXTRA_MODULE.py
files (e.g. generated `*_pbzero.py` writers) are copied to OUT_DIR and compiled in the same
group, so their classes can derive natively from `Message`. Without a C compiler it exits
with status 3 and builds nothing: the pure-Python package keeps working unchanged.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "packages" / "protozero" / "src" / "protozero"
COMPILED = ["_proto_utils", "_scattered_stream_writer", "_message", "_decoder", "_heap_buffered"]
NO_COMPILER = 3

SETUP = """
import sys
from setuptools import setup
from mypyc.build import mypycify

setup(
    name="protozero-mypyc",
    ext_modules=mypycify(sys.argv[1:], opt_level="3", strip_asserts=True),
    script_args=["build_ext", "--inplace"],
)
"""


def have_compiler() -> bool:
    """Whether the C compiler Python was built with (or `cc`) is on PATH."""
    configured = (sysconfig.get_config_var("CC") or "cc").split()[0]
    return shutil.which(configured) is not None or shutil.which("cc") is not None


def build(out: Path, extras: list[Path]) -> None:
    """Copies the sources into `out` and compiles them there."""
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(SOURCE, out / "protozero", ignore=shutil.ignore_patterns("__pycache__"))
    targets = [f"protozero/{name}.py" for name in COMPILED]
    for extra in extras:
        shutil.copy2(extra, out / extra.name)
        targets.append(extra.name)
    (out / "setup_mypyc.py").write_text(SETUP, encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "setup_mypyc.py", *targets],
        cwd=out,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        sys.exit(f"build_mypyc: compilation failed:\n{result.stdout}\n{result.stderr}")
    missing = [t for t in targets if not list(out.glob(t.removesuffix(".py") + ".*.so"))]
    if missing:
        sys.exit(f"build_mypyc: no extension module was produced for {', '.join(missing)}")


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("out", type=Path, help="directory to build into (replaced)")
    parser.add_argument("extras", type=Path, nargs="*", help="extra modules to compile along")
    args = parser.parse_args(argv)
    if not have_compiler():
        print("build_mypyc: no C compiler found; the pure-Python modules will be used")
        return NO_COMPILER
    build(args.out.resolve(), [e.resolve() for e in args.extras])
    print(f"build_mypyc: compiled protozero into {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
