"""The packages' `build.py` (what `tools/build_native.py` and `pip install` run), on a package
of its own: the builds of several Python versions share a checkout's `src/`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from perfetto_testing import SLOW_TIMEOUT

ROOT = Path(__file__).resolve().parent.parent


def test_a_rebuild_keeps_the_other_python_versions_builds(tmp_path: Path) -> None:
    shutil.copy(ROOT / "packages" / "protozero" / "build.py", tmp_path / "build.py")
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

    env = {**os.environ, "PERFETTO_PY_EXPECT_COMPILED": "1"}
    build = [sys.executable, "build.py"]
    result = subprocess.run(
        build,
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=SLOW_TIMEOUT,
        check=False,
    )

    assert result.returncode == 0, result.stderr
    assert [b.read_bytes() for b in other_builds] == [b"an older build"] * len(others)
    load = "import tiny._fast as m; print(m.__file__, m.add(2, 3))"
    loaded = subprocess.run(
        [sys.executable, "-c", load],
        cwd=tmp_path / "src",
        capture_output=True,
        text=True,
        timeout=SLOW_TIMEOUT,
        check=True,
    )
    assert loaded.stdout == f"{own_build} 5\n"
