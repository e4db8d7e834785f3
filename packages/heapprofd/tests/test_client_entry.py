"""The client's ways in, as a user meets them: `heapprofd run`, imports, clear errors."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

BIN = Path(sys.executable).parent


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )


def test_heapprofd_run_runs_the_program_without_a_daemon(tmp_path: Path) -> None:
    script = tmp_path / "hello.py"
    script.write_text("import sys\nprint('hello', sys.argv[1:])\n")
    env_socket = f"PERFETTO_HEAPPROFD_SOCK_NAME={tmp_path / 'none'}"
    result = subprocess.run(
        ["env", env_socket, sys.executable, "-m", "heapprofd", "run", "--", str(script), "a"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "hello ['a']\n"


def test_heapprofd_run_mistakes_get_one_line(tmp_path: Path) -> None:
    for args in (["run"], ["run", "--", "missing.py"], ["run", "-m"]):
        result = _run("-m", "heapprofd", *args, cwd=tmp_path)
        assert result.returncode == 1
        assert len(result.stderr.strip().splitlines()) == 1
        assert result.stderr.startswith("heapprofd run: ")


def test_heapprofd_run_shows_the_programs_traceback_as_python_does(tmp_path: Path) -> None:
    (tmp_path / "prog.py").write_text("def fail():\n    raise KeyError('k')\nfail()\n")
    (tmp_path / "mod.py").write_text("import json\njson.loads('{')\n")
    env = dict(os.environ, PERFETTO_HEAPPROFD_SOCK_NAME=str(tmp_path / "none"))
    for program in (["prog.py"], ["-m", "mod"]):
        plain = subprocess.run(
            [sys.executable, *program], cwd=tmp_path, capture_output=True, text=True, check=False
        )
        result = subprocess.run(
            [str(BIN / "heapprofd"), "run", "--", *program],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == plain.returncode == 1
        assert "_daemon.py" not in result.stderr
        assert "runpy" not in result.stderr
        expected = [line for line in plain.stderr.splitlines() if "runpy" not in line]
        assert result.stderr.splitlines() == expected


def test_heapprofd_answers_version_and_help_and_rejects_unknown_options() -> None:
    heapprofd = str(BIN / "heapprofd")
    result = subprocess.run([heapprofd, "--version"], capture_output=True, text=True, check=False)
    assert result.returncode == 0
    assert result.stdout == f"heapprofd (perfetto-py) {version('perfetto-heapprofd')}\n"
    result = subprocess.run([heapprofd, "--help"], capture_output=True, text=True, check=False)
    assert result.returncode == 0
    assert "heapprofd run [--] script.py [args]" in result.stdout.split("\n\n")[0]
    result = subprocess.run([heapprofd, "--bogus"], capture_output=True, text=True, check=False)
    assert result.returncode == 1
    assert result.stderr == ("heapprofd: unrecognized arguments: --bogus (see heapprofd --help)\n")


def test_without_the_compiled_client_the_import_says_so(tmp_path: Path) -> None:
    code = "import sys; sys.modules['heapprofd._native'] = None; import heapprofd.client"
    result = _run("-c", code, cwd=tmp_path)
    assert result.returncode == 1
    assert "heapprofd's client is compiled code and is not built here" in result.stderr
    result = _run(
        "-c", "import sys; sys.modules['heapprofd._native'] = None; import heapprofd", cwd=tmp_path
    )
    assert result.returncode == 0


def test_heapprofd_run_without_the_compiled_client_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "x.py").write_text("print('ran')\n")
    code = (
        "import sys; sys.modules['heapprofd._native'] = None; "
        "from heapprofd._daemon import main; sys.exit(main(['run', 'x.py']))"
    )
    result = _run("-c", code, cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1
    assert "not built" in result.stderr
