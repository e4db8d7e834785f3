"""heap_profile as a user runs it: one command, a trace, clear errors."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
from heapprofd import HeapprofdError
from heapprofd._heap_profile import _start_notified
from hp_testlib import heap_dumps

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "heap_profile_example.py"


def _heap_profile(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).with_name("heap_profile")
    argv = (
        [str(script)]
        if script.exists()
        else [
            sys.executable,
            "-c",
            "import sys; from heapprofd._heap_profile import main; sys.exit(main())",
        ]
    )
    return subprocess.run(
        [*argv, *args], check=False, cwd=cwd, env=env, capture_output=True, text=True, timeout=180
    )


def _private_env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PERFETTO_CONSUMER_SOCK_NAME"] = str(tmp_path / "no-traced-here")
    env.pop("PERFETTO_PRODUCER_SOCK_NAME", None)
    env.pop("PERFETTO_HEAPPROFD_SOCK_NAME", None)
    return env


def test_the_example_is_recorded_in_one_command(tmp_path: Path) -> None:
    result = _heap_profile(
        "-o",
        "heap.pftrace",
        "--all-heaps",
        "--",
        str(EXAMPLE),
        cwd=tmp_path,
        env=_private_env(tmp_path),
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "cached 10000 entries, 64 connections open\n"  # the program's alone
    assert "heap_profile: program exited with status 0\n" in result.stderr
    assert "heap_profile: wrote heap.pftrace (" in result.stderr
    assert "ui.perfetto.dev" in result.stderr
    dumps = {d.heap_name: d for d in heap_dumps((tmp_path / "heap.pftrace").read_bytes())}
    assert set(dumps) == {"python", "connection_pool"}
    cache = dumps["python"].totals("load_cache")
    expected = 10_000 * (1024 + 33)  # each bytes object: 33 bytes of header and the data
    assert 0.8 * expected < cache["allocated"] - cache["freed"] < 1.25 * expected
    requests = dumps["python"].totals("handle_requests")
    assert requests["freed"] >= 0.95 * requests["allocated"] > 0
    assert dumps["connection_pool"].totals("open_connections")["allocated"] == 64 * 64 * 1024


def test_mistakes_get_one_line_and_status_1(tmp_path: Path) -> None:
    env = _private_env(tmp_path)
    for args in (
        ["--", "missing.py"],
        [],
        ["-i", "0", "--", str(EXAMPLE)],
        ["-i", "abc", "--", str(EXAMPLE)],
        ["--no-such-flag", "--", str(EXAMPLE)],
    ):
        result = _heap_profile(*args, cwd=tmp_path, env=env)
        assert result.returncode == 1, args
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert result.stderr.startswith("heap_profile: ")
        assert result.stdout == ""
    assert not list(tmp_path.iterdir())


def test_version() -> None:
    result = _heap_profile("--version", cwd=ROOT, env=dict(os.environ))
    assert result.returncode == 0
    assert result.stdout == f"heap_profile (perfetto-py) {version('perfetto-heapprofd')}\n"


FAILING = """\
import sys
def fail():
    print("working")
    print("warning", file=sys.stderr)
    raise ValueError("bad input")
fail()
"""


def test_the_program_keeps_its_output_its_traceback_and_its_status(tmp_path: Path) -> None:
    (tmp_path / "prog.py").write_text(FAILING)
    plain = subprocess.run(
        [sys.executable, "prog.py"], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert plain.returncode == 1
    result = _heap_profile("prog.py", cwd=tmp_path, env=_private_env(tmp_path))
    assert result.returncode == 1
    assert result.stdout == "working\n"
    program_stderr = [line for line in result.stderr.splitlines() if "heap_profile: " not in line]
    assert program_stderr == plain.stderr.splitlines()
    assert "heap_profile: program exited with status 1" in result.stderr
    assert (tmp_path / "heap_profile.pftrace").stat().st_size > 0


def test_an_exit_status_and_a_module_pass_through(tmp_path: Path) -> None:
    (tmp_path / "tool.py").write_text("import sys\nprint(sys.argv[1:])\nsys.exit(3)\n")
    env = _private_env(tmp_path)
    result = _heap_profile("-o", "t.pftrace", "--", "-m", "tool", "a", cwd=tmp_path, env=env)
    assert result.returncode == 3, result.stderr
    assert result.stdout == "['a']\n"
    assert "heap_profile: program exited with status 3" in result.stderr


def test_a_program_killed_by_a_signal_is_said_so_and_exits_128_plus_it(tmp_path: Path) -> None:
    (tmp_path / "die.py").write_text("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
    result = _heap_profile("die.py", cwd=tmp_path, env=_private_env(tmp_path))
    assert result.returncode == 128 + 9, result.stderr
    assert "heap_profile: program killed by SIGKILL\n" in result.stderr
    assert result.stdout == ""


_LONG_ERROR = "ImportError: {}: cannot open shared object file".format(
    "/".join(["", *["directory"] * 40, "_native.so"])
)


def _fails_to_start(argv: list[str]) -> int:
    trace = "Traceback (most recent call last):\n" + '  File "x.py", line 1\n' * 20
    os.write(2, f"{trace}{_LONG_ERROR}\n".encode())  # fd 2: pytest may hold sys.stderr
    return 1


def test_a_helper_that_fails_to_start_is_named_with_its_whole_error() -> None:
    with pytest.raises(HeapprofdError) as info:
        _start_notified("helper", _fails_to_start, dict(os.environ), "TEST_NOTIFY_FD")
    assert str(info.value) == f"helper did not start: {_LONG_ERROR}"
