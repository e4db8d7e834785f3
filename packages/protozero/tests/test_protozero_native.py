"""The switch between the compiled and the pure build, as a user of the package sees it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from protozero import _native

_PROBE = (
    "import protozero, protozero._native as n;"
    "print(sorted(n.compiled_modules('protozero').items()))"
)


def _run(env: dict[str, str], *flags: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PERFETTO_PY_")}
    return subprocess.run(
        [sys.executable, *flags, "-c", _PROBE],
        env={**clean, **env},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )


def test_every_compiled_module_has_its_pure_source() -> None:
    modules = _native.compiled_modules("protozero")
    assert "protozero._message" in modules
    assert "protozero._scattered_stream_writer" in modules


def test_pure_env_var_loads_every_module_from_its_py_file() -> None:
    result = _run({_native.PURE_ENV: "1"})
    state = eval(result.stdout)  # a printed list of (name, loaded) pairs
    assert state
    assert not any(loaded for _, loaded in state)
    assert result.stderr == ""


def test_pure_build_says_so_once_under_dev_mode() -> None:
    result = _run({_native.PURE_ENV: "1"}, "-X", "dev")
    lines = [line for line in result.stderr.splitlines() if "pure Python" in line]
    assert len(lines) == 1
    assert "protozero._message" in lines[0]
    assert f"{_native.PURE_ENV}=1" in lines[0]


def test_an_install_without_compiled_modules_says_so_once_unasked(tmp_path: Path) -> None:
    # protozero as a build without a C compiler installs it: the sources, no .so.
    source = Path(_native.__file__).parent
    shutil.copytree(source, tmp_path / "protozero", ignore=shutil.ignore_patterns("*.so"))
    env = {"PYTHONPATH": str(tmp_path)}
    result = _run(env)
    assert not any(loaded for _, loaded in eval(result.stdout))
    [line] = result.stderr.splitlines()
    assert line.startswith("protozero: running as pure Python (no compiled modules were built)")
    assert _run({**env, _native.PURE_ENV: "1"}).stderr == ""  # asked for: silent


def test_compiled_build_says_nothing_when_it_loaded() -> None:
    state = dict(eval(_run({}).stdout))
    if not all(state.values()):  # the pure run of the suite: nothing compiled to check
        return
    assert "pure Python" not in _run({_native.NOTICE_ENV: "1"}).stderr


def test_both_builds_write_the_same_bytes() -> None:
    probe = [
        sys.executable,
        str(Path(__file__).with_name("protozero_native_probe.py")),
        "20261123",
        "300",
    ]

    def run(env: dict[str, str]) -> list[str]:
        clean = {k: v for k, v in os.environ.items() if not k.startswith("PERFETTO_PY_")}
        result = subprocess.run(
            probe, env={**clean, **env}, capture_output=True, text=True, check=True, timeout=120
        )
        return result.stdout.splitlines()

    compiled, pure = run({}), run({_native.PURE_ENV: "1"})
    assert len(compiled) == 300
    assert compiled == pure
