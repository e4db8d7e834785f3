"""The build backend (perfetto_build, what `pip install` and `tools/build_native.py` run) on a
package of its own: the builds of several Python versions share a checkout's `src/`, and a
module compiled from other sources than the checkout's never loads."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from perfetto_testing import SLOW_TIMEOUT

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import build_native  # noqa: E402
from package_graph import Package  # noqa: E402

BACKEND = ROOT / "tools" / "perfetto-build" / "perfetto_build.py"
REFUSAL = (
    "ImportError: tiny._hook, tiny._monitor: compiled from other sources than this checkout's;"
    " rebuild with `python3 tools/dev.py run python tools/build_native.py` (or run pure with"
    " PERFETTO_PY_PURE=1)"
)


def _build(project: Path, cache: Path | None = None) -> str:
    """Runs the backend in `project`, with the build cache `cache` or none; its output."""
    env = {**os.environ, "PERFETTO_PY_EXPECT_COMPILED": "1"}
    env.pop("PERFETTO_BUILD_CACHE", None)  # dev.py sets it: the tiny builds stay out of it
    if cache is not None:
        env["PERFETTO_BUILD_CACHE"] = str(cache)
    result = subprocess.run(
        [sys.executable, str(BACKEND)],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=SLOW_TIMEOUT,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def _tiny(project: Path) -> Path:
    """A package laid out as ours: `src/tiny/` with a pure-mode module and a `.pyx` that
    includes another."""
    package = project / "src" / "tiny"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        "from protozero import _native\n\n_native.select_build(__name__)\n"
    )
    (package / "_fast.py").write_text("def add(a, b):\n    return a + b\n")
    (package / "_fast.pxd").write_text("cpdef long add(long a, long b)\n")
    (package / "_hook.pyx").write_text("def hooked():\n    return 1\n")
    (package / "_monitor.pyx").write_text('include "_hook.pyx"\n\ndef monitored():\n    return 2\n')
    return package


def _import(src: Path, code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=src,
        capture_output=True,
        text=True,
        timeout=SLOW_TIMEOUT,
        check=False,
    )


def test_a_rebuild_keeps_the_other_python_versions_builds(tmp_path: Path) -> None:
    package = tmp_path / "src" / "tiny"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "_fast.py").write_text("def add(a, b):\n    return a + b\n")
    (package / "_fast.pxd").write_text("cpdef long add(long a, long b)\n")
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    tag = f"cpython-3{sys.version_info.minor}"
    others = [f"cpython-3{minor}" for minor in (11, 12, 13) if minor != sys.version_info.minor]
    other_builds = [package / f"_fast.{suffix[1:].replace(tag, other)}" for other in others]
    own_build = package / f"_fast{suffix}"
    # Built before the source was last edited, as after a `git checkout`.
    for built in [*other_builds, own_build]:
        built.write_bytes(b"an older build")
        os.utime(built, (1_000_000, 1_000_000))

    _build(tmp_path)

    assert [b.read_bytes() for b in other_builds] == [b"an older build"] * len(others)
    loaded = _import(tmp_path / "src", "import tiny._fast as m; print(m.__file__, m.add(2, 3))")
    assert loaded.stdout == f"{own_build} 5\n", loaded.stderr


def test_a_module_built_from_other_sources_refuses_to_import_until_rebuilt(
    tmp_path: Path,
) -> None:
    package = _tiny(tmp_path)
    tiny = Package("tiny", tmp_path, "tiny", "0", "tiny", {}, {}, ())
    _build(tmp_path)
    use = "import tiny, tiny._fast as f, tiny._monitor as m; print(f.add(2, 3), m.monitored())"
    assert _import(tmp_path / "src", use).stdout == "5 2\n"
    assert build_native.stale_reason(tiny) is None

    # Rewritten with the same bytes (a `git checkout`): still current.
    os.utime(package / "_fast.py", (2_000_000_000, 2_000_000_000))
    assert _import(tmp_path / "src", use).stdout == "5 2\n"
    # An edit of the included file: both modules that were compiled from it are stale.
    with (package / "_hook.pyx").open("a") as f:
        f.write("\ndef added():\n    return 3\n")

    refused = _import(tmp_path / "src", use)
    assert refused.returncode == 1
    assert refused.stderr.splitlines()[-1] == REFUSAL
    assert build_native.stale_reason(tiny) == "sources changed: tiny._hook, tiny._monitor"
    pure = subprocess.run(
        [sys.executable, "-c", "import tiny._fast as m; print(m.add(2, 3))"],
        cwd=tmp_path / "src",
        env={**os.environ, "PERFETTO_PY_PURE": "1"},
        capture_output=True,
        text=True,
        timeout=SLOW_TIMEOUT,
        check=False,
    )
    assert pure.stdout == "5\n", pure.stderr

    _build(tmp_path)
    assert _import(tmp_path / "src", use).stdout == "5 2\n"
    assert build_native.stale_reason(tiny) is None


def test_a_compiled_module_without_a_record_refuses_in_a_checkout(tmp_path: Path) -> None:
    package = _tiny(tmp_path)
    _build(tmp_path)
    (
        package / f".native-build{sysconfig.get_config_var('EXT_SUFFIX').removesuffix('.so')}"
    ).unlink()
    refused = _import(tmp_path / "src", "import tiny")
    assert refused.returncode == 1
    assert "_fast" in refused.stderr.splitlines()[-1]
    assert "tools/build_native.py" in refused.stderr.splitlines()[-1]


def test_the_cache_gives_back_what_was_compiled_from_the_same_inputs(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    project = tmp_path / "project"
    package = _tiny(project)
    use = "import tiny._fast as f, tiny._monitor as m; print(f.add(2, 3), m.monitored())"
    assert "taken from" not in _build(project, cache)
    assert len(list(cache.iterdir())) == 3  # one entry per module

    # The same sources elsewhere (a wheel's copy of the package): nothing compiled.
    copy = tmp_path / "copy"
    shutil.copytree(project, copy, ignore=shutil.ignore_patterns("*.so", ".native-build.*"))
    assert f"3 of 3 modules of copy taken from {cache}" in _build(copy, cache)
    assert _import(copy / "src", use).stdout == "5 2\n"

    # An edit of the file `_monitor.pyx` includes: those two are compiled again.
    (package / "_hook.pyx").write_text(
        "def hooked():\n    return 1\n\ndef monitored():\n    return 7\n"
    )
    (package / "_monitor.pyx").write_text('include "_hook.pyx"\n')
    assert f"1 of 3 modules of project taken from {cache}" in _build(project, cache)
    assert _import(project / "src", use).stdout == "5 7\n"
    assert len(list(cache.iterdir())) == 5


def test_an_optional_module_that_could_not_be_built_is_tried_again(tmp_path: Path) -> None:
    # A library missing at the first build (its header absent) and installed later: the module
    # counts as not built, so the next build_native run builds it, as a user expects.
    package = _tiny(tmp_path)
    tiny = Package("tiny", tmp_path, "tiny", "0", "tiny", {}, {}, ())
    (package / "_opt.pyx").write_text(
        '# build: optional\ncdef extern from "tiny_dep.h":\n    int tiny_dep()\n\n'
        "def dep():\n    return tiny_dep()\n"
    )
    _build(tmp_path)  # warns on stderr, and succeeds
    assert build_native.stale_reason(tiny) == "not built: tiny._opt"

    (tmp_path / "src" / "tiny_dep.h").write_text("static int tiny_dep(void) { return 7; }\n")
    _build(tmp_path)
    assert build_native.stale_reason(tiny) is None
    loaded = _import(tmp_path / "src", "import tiny._opt as m; print(m.dep())")
    assert loaded.stdout == "7\n", loaded.stderr
