"""A wheel holds exactly the compiled modules of the Python that built it, when the builds of
several Python versions share one tree (a checkout's `src/` holds each version's develop build).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path
from types import ModuleType

import pytest
from perfetto_testing import SLOW_TIMEOUT

ROOT = Path(__file__).resolve().parent.parent


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _another_python() -> str:
    """An interpreter of another supported Python version than the running one."""
    pytest.importorskip("nox")  # the project's .venv has it; the other versions' venvs do not
    noxfile = _load("noxfile", ROOT / "noxfile.py")
    running = f"{sys.version_info.major}.{sys.version_info.minor}"
    for version in noxfile.ALL_PYTHONS:
        interpreter = noxfile._interpreter(version) if version != running else None
        if interpreter is not None:
            return str(interpreter)
    pytest.fail(f"no Python of {noxfile.ALL_PYTHONS} besides {running} (pyenv holds them here)")


def _tiny_package(directory: Path) -> Path:
    """A package with one compiled module, built as protozero is (its pyproject.toml names the
    build backend perfetto_build), with develop builds of other Python versions in its `src/`."""
    directory.mkdir()
    pyproject = (ROOT / "packages" / "protozero" / "pyproject.toml").read_text()
    (directory / "pyproject.toml").write_text(
        pyproject.replace("perfetto-protozero", "perfetto-tiny").replace("protozero", "tiny")
    )
    (directory / "README.md").write_text("tiny\n")
    package = directory / "src" / "tiny"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "_fast.py").write_text("def add(a, b):\n    return a + b\n")
    (package / "_fast.pxd").write_text("cpdef long add(long a, long b)\n")
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    own = f"cpython-3{sys.version_info.minor}"
    for minor in (11, 12, 13):
        other = suffix.replace(own, f"cpython-3{minor}")
        if other != suffix:
            (package / f"_fast{other}").write_bytes(b"another Python's develop build")
    return directory


def _wheel_modules(wheel: Path) -> dict[str, bytes]:
    """The compiled Python modules in `wheel`, by name, with their first bytes."""
    modules = _load("dists", ROOT / "tools" / "dists.py").compiled_modules(wheel)
    with zipfile.ZipFile(wheel) as archive:
        return {name: archive.read(name)[:4] for name in modules}


def _build_wheel(python: str, tree: Path, out: Path, isolated: bool, links: Path) -> Path:
    """The wheel of `tree` built by `python`; isolated, its build backend from `links`."""
    isolation = ["--find-links", str(links)] if isolated else ["--no-build-isolation"]
    command = [python, "-m", "pip", "wheel", "-q", "--no-deps", *isolation, "-w", str(out), "."]
    env = {**os.environ, "PERFETTO_PY_EXPECT_COMPILED": "1"}
    env.pop("PYTHONPATH", None)
    result = subprocess.run(
        command,
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=SLOW_TIMEOUT,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (wheel,) = out.glob("perfetto_tiny-*.whl")
    return wheel


def _suffix_of(python: str) -> str:
    script = "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))"
    run = subprocess.run(
        [python, "-c", script], capture_output=True, text=True, timeout=SLOW_TIMEOUT, check=True
    )
    return run.stdout.strip()


def test_each_pythons_wheel_holds_only_its_own_compiled_modules(tmp_path: Path) -> None:
    tree = _tiny_package(tmp_path / "tiny")
    other = _another_python()
    # The other version in an isolated build environment (its own Cython from the index), the
    # running one with the project's.
    builds = [(other, True), (sys.executable, False)]
    backend = tmp_path / "backend"
    pip = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
    subprocess.run(
        [*pip, "-w", str(backend), str(ROOT / "tools" / "perfetto-build")],
        check=True,
        timeout=SLOW_TIMEOUT,
    )
    for n, (python, isolated) in enumerate(builds):
        wheel = _build_wheel(python, tree, tmp_path / f"wheels-{n}", isolated, backend)
        expected = f"tiny/_fast{_suffix_of(python)}"
        assert _wheel_modules(wheel) == {expected: b"\x7fELF"}, wheel.name
    # The tree is as it was: each other Python's develop build, and no new one.
    left = [p.read_bytes() for p in (tree / "src" / "tiny").glob("*.so")]
    assert left == [b"another Python's develop build"] * 2
