"""Builds heapprofd's compiled client (`heapprofd._native`) in place.

    python packages/heapprofd/build_ext.py

The extension is rebuilt only when `_native.pyx` is newer than the built module.
"""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

SOURCE = Path(__file__).resolve().parent / "src" / "heapprofd" / "_native.pyx"


def built_module() -> Path:
    """Where the built extension lives."""
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    return SOURCE.with_name("_native" + str(suffix))


def build(force: bool = False) -> Path:
    """Builds the extension unless it is up to date; returns its path."""
    target = built_module()
    if not force and target.exists() and target.stat().st_mtime >= SOURCE.stat().st_mtime:
        return target
    subprocess.run(
        [sys.executable, "-m", "cython", "-3", "--module-name", "heapprofd._native", str(SOURCE)],
        check=True,
        cwd=SOURCE.parent,
    )
    c_file = SOURCE.with_suffix(".c")
    include = sysconfig.get_paths()["include"]
    cc = sysconfig.get_config_var("CC") or "gcc"
    flags = ["-O2", "-fPIC", "-shared", "-fno-strict-aliasing", "-Wno-unused-function"]
    tmp = target.with_suffix(".tmp")
    subprocess.run(
        [*cc.split(), *flags, f"-I{include}", str(c_file), "-o", str(tmp), "-lm"], check=True
    )
    tmp.replace(target)
    c_file.unlink()
    return target


if __name__ == "__main__":
    print(build(force="--force" in sys.argv))
