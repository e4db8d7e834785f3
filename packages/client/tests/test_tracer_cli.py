"""perfetto-trace's command line as users type it: from another directory, with modules
nobody here wrote, on a terminal."""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from tracer_support import HOOKS, decode, require_compiled_hook

TRACE = [sys.executable, "-m", "perfetto_client._tracer", "run"]


def _run(args: list[str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )


def test_everything_after_the_module_is_the_programs(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "in.json").write_text('{"b": [1, 2], "a": null}')
    trace = tmp_path / "t.pftrace"
    proc = _run(
        [*TRACE, "-q", "-o", str(trace), "-m", "json.tool", "--indent", "2", "in.json", "out.json"],
        cwd=data,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert (data / "out.json").read_text() == json.dumps({"b": [1, 2], "a": None}, indent=2) + "\n"
    assert "main" in decode(trace).all_names()  # json.tool run as __main__


def test_the_programs_own_o_and_double_dash_reach_it(tmp_path: Path) -> None:
    (tmp_path / "show_args.py").write_text("import sys\nprint(sys.argv[1:])\n")
    for program_args in (["-o", "foo"], ["--", "-w", "100", "f.md"], ["-q", "--pure"]):
        plain = _run([sys.executable, "-m", "show_args", *program_args], cwd=tmp_path)
        trace = tmp_path / "a.pftrace"
        proc = _run([*TRACE, "-q", "-o", str(trace), "-m", "show_args", *program_args], tmp_path)
        assert proc.returncode == plain.returncode == 0, proc.stderr
        assert proc.stdout == plain.stdout == f"{program_args}\n"
        assert trace.stat().st_size > 0
        assert not (tmp_path / "foo").exists()
        trace.unlink()


def test_options_before_the_module_stay_perfetto_traces(tmp_path: Path) -> None:
    (tmp_path / "show_args.py").write_text("import sys\nprint(sys.argv[1:])\n")
    for own in (["-qo", "b.pftrace"], ["--out=b.pftrace", "-q"], ["-q", "--output", "b.pftrace"]):
        proc = _run([*TRACE, *own, "-mshow_args", "x"], tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout == "['x']\n"
        assert (tmp_path / "b.pftrace").stat().st_size > 0
        (tmp_path / "b.pftrace").unlink()


def test_a_program_that_closes_stdout_exits_as_untraced(tmp_path: Path) -> None:
    (tmp_path / "small.json").write_text('{"a": 1}')
    plain = _run([sys.executable, "-m", "json.tool", "small.json"], cwd=tmp_path)
    proc = _run(
        [*TRACE, "-o", str(tmp_path / "t.pftrace"), "-m", "json.tool", "small.json"], tmp_path
    )
    assert proc.returncode == plain.returncode == 0, proc.stderr
    assert proc.stdout == plain.stdout == '{\n    "a": 1\n}\n'
    assert "Traceback" not in proc.stderr
    assert "wrote" in proc.stderr


@pytest.mark.parametrize("hook", HOOKS)
def test_a_syntax_error_is_shown_as_python_shows_it(tmp_path: Path, hook: str) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "bad.py").write_text("x = 1\ndef (:\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    plain = _run([sys.executable, "../src/bad.py"], cwd=elsewhere)
    options = ["--pure"] if hook == "pure" else []
    proc = _run([*TRACE, *options, "-o", "t.pftrace", "../src/bad.py"], cwd=elsewhere)
    assert proc.returncode == plain.returncode == 1
    assert proc.stderr == plain.stderr
    assert f'File "{elsewhere}/../src/bad.py", line 2' in proc.stderr
    assert proc.stdout == ""


@pytest.mark.parametrize("hook", HOOKS)
def test_an_uncaught_keyboard_interrupt_is_named_as_python_names_it(
    tmp_path: Path, hook: str
) -> None:
    if hook == "compiled":
        require_compiled_hook()
    (tmp_path / "prog.py").write_text("def stop():\n    raise KeyboardInterrupt\nstop()\n")
    options = ["--pure"] if hook == "pure" else []
    proc = _run([*TRACE, *options, "-o", "t.pftrace", "prog.py"], cwd=tmp_path)
    assert proc.returncode == -signal.SIGINT
    assert "KeyboardInterrupt" in proc.stderr.splitlines()
    [main] = decode(tmp_path / "t.pftrace").by_name("MainThread")
    assert "uncaught KeyboardInterrupt" in [name for _, name in main.instants]


@pytest.mark.parametrize("hook", HOOKS)
def test_the_summary_says_which_hook_ran(tmp_path: Path, hook: str) -> None:
    if hook == "compiled":
        require_compiled_hook()
    (tmp_path / "small.json").write_text('{"a": 1}')
    options = ["--pure"] if hook == "pure" else []
    proc = _run([*TRACE, *options, "-o", "t.pftrace", "-m", "json.tool", "small.json"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    [wrote] = [
        line for line in proc.stderr.splitlines() if line.startswith("perfetto-trace: wrote")
    ]
    assert wrote.endswith(f"({hook} hook)")
    assert "running as pure Python" not in proc.stderr  # compiled, or pure as asked: no notice


# As on 3.13 before its hook used only exported symbols: the .so is there but cannot load.
_UNLOADABLE_HOOK = """
import sys
class Unloadable:
    def find_spec(self, name, path, target=None):
        if name in ("perfetto_client._tracer._hook", "perfetto_client._tracer._monitor"):
            raise ImportError("undefined symbol: _PyEval_SetTrace")
        return None
sys.meta_path.insert(0, Unloadable())
"""


def test_a_compiled_hook_that_does_not_load_is_said_once(tmp_path: Path) -> None:
    (tmp_path / "sitecustomize.py").write_text(_UNLOADABLE_HOOK)
    (tmp_path / "small.json").write_text('{"a": 1}')
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    env.pop("PERFETTO_PY_PURE", None)
    argv = [*TRACE, "-o", "t.pftrace", "-m", "json.tool", "small.json"]
    proc = subprocess.run(
        argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr
    notices = [line for line in proc.stderr.splitlines() if "running as pure Python" in line]
    assert notices == [
        "perfetto_client._tracer._recorder: running as pure Python "
        "(undefined symbol: _PyEval_SetTrace)"
    ]
    [wrote] = [line for line in proc.stderr.splitlines() if "perfetto-trace: wrote" in line]
    assert wrote.endswith("(pure hook)")


def _on_a_terminal(args: list[str], cwd: Path, stdout_to_file: Path | None) -> str:
    """Runs `args` with stderr (and stdout, unless `stdout_to_file`) on a pseudo-terminal."""
    master, slave = pty.openpty()
    stdout = open(stdout_to_file, "w") if stdout_to_file else None  # noqa: SIM115
    proc = subprocess.Popen(
        args, cwd=cwd, stdin=subprocess.DEVNULL, stdout=stdout or slave, stderr=slave
    )
    os.close(slave)
    output = b""
    try:
        while True:
            ready, _, _ = select.select([master], [], [], 120)
            if not ready:
                break
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: the terminal's last writer is gone
                break
            if not chunk:
                break
            output += chunk
        proc.wait(timeout=120)
    finally:
        proc.kill()
        proc.wait()
        os.close(master)
        if stdout:
            stdout.close()
    return output.decode()


def test_the_progress_line_never_shares_a_line_with_the_programs_output(tmp_path: Path) -> None:
    program = (
        "import time\nfor i in range(8):\n    print('tick', i, flush=True)\n    time.sleep(0.3)\n"
    )
    (tmp_path / "prog.py").write_text(program)
    args = [*TRACE, "-o", "t.pftrace", "prog.py"]
    lines = _on_a_terminal(args, tmp_path, None).replace("\r\n", "\n").split("\n")
    ticks = [line for line in lines if "tick" in line]
    assert len(ticks) == 8
    assert [line for line in ticks if "perfetto-trace" in line] == []
    # With the program's stdout elsewhere, the terminal shows the progress line.
    shown = _on_a_terminal(args, tmp_path, tmp_path / "stdout.txt")
    assert "MB written" in shown
    assert (tmp_path / "stdout.txt").read_text().count("tick") == 8
