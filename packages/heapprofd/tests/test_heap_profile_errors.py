"""heap_profile's output and program are checked before the program runs, and a trace that
cannot be written at the end is kept elsewhere: one line each, a non-zero status."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from heapprofd._preload import native_unavailable
from hp_testlib import heap_dumps
from test_heap_profile_cli import _heap_profile, _private_env

PROG = """\
import pathlib
pathlib.Path("ran").write_text("yes")
def prog_keeps():
    return [bytearray(1000) for _ in range(4096)]
kept = prog_keeps()
for i in range(200):  # as many callstacks: a trace larger than a page
    exec(f"def prog_{i}():\\n    return bytearray(8192)\\n")
more = [eval(f"prog_{i}")() for i in range(200)]
print("done")
"""


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """A directory with prog.py, where heap_profile runs, and a temporary directory of its own."""
    (tmp_path / "work").mkdir()
    (tmp_path / "tmp").mkdir()
    (tmp_path / "work" / "prog.py").write_text(PROG)
    return tmp_path / "work"


def _env(work: Path) -> dict[str, str]:
    env = _private_env(work)
    env["TMPDIR"] = str(work.parent / "tmp")
    return env


def _one_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, result.stderr
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("heap_profile: ")
    return lines[0]


def test_an_output_that_cannot_be_written_stops_before_the_program(work: Path) -> None:
    assert not os.path.exists("/nonexist")
    line = _one_line(_heap_profile("-o", "/nonexist/h.pftrace", "--", "prog.py", cwd=work,
                                   env=_env(work)))  # fmt: skip
    assert line == "heap_profile: cannot write /nonexist/h.pftrace: No such file or directory"
    line = _one_line(_heap_profile("-o", str(work), "--", "prog.py", cwd=work, env=_env(work)))
    assert line == f"heap_profile: cannot write {work}: Is a directory"
    assert not (work / "ran").exists()  # the program did not run


def test_a_directory_is_not_a_program(work: Path) -> None:
    some_dir = work.parent / "tmp"
    line = _one_line(_heap_profile("--", str(some_dir), cwd=work, env=_env(work)))
    assert line == f"heap_profile: can't find '__main__' module in '{some_dir}'"
    assert sorted(os.listdir(work)) == ["prog.py"]  # no trace written
    run = subprocess.run(
        [sys.executable, "-m", "heapprofd", "run", str(some_dir)],
        cwd=work, capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert run.returncode == 1
    assert run.stderr == f"heapprofd run: can't find '__main__' module in '{some_dir}'\n"


def test_native_program_that_cannot_run_is_one_line(work: Path) -> None:
    some_dir = work.parent / "tmp"
    (work / "hpvictimtool").write_text("#!/bin/sh\necho hi\n")
    (work / "hpvictimtool").chmod(0o644)
    cases = {
        str(some_dir): f"cannot run {some_dir}: it is a directory",
        "./hpvictimtool": "cannot run ./hpvictimtool: it is not executable",
        "hpvictimtool": "no such program on PATH: hpvictimtool (a file here is ./hpvictimtool)",
    }
    for program, message in cases.items():
        line = _one_line(_heap_profile("--native", "--", program, cwd=work, env=_env(work)))
        if native_unavailable() is None:
            assert line == f"heap_profile: {message}"
    (work / "hpvictimtool").write_text("not a program\n")
    (work / "hpvictimtool").chmod(0o755)
    if native_unavailable() is None:  # found only when it is run: exec refuses it
        line = _one_line(
            _heap_profile("--native", "--", "./hpvictimtool", cwd=work, env=_env(work))
        )
        assert line == "heap_profile: cannot run ./hpvictimtool: Exec format error"
    assert sorted(os.listdir(work)) == ["hpvictimtool", "prog.py"]


def _kept(line: str, work: Path) -> bytes:
    """The trace that the line says was kept in heap_profile's temporary directory."""
    prefix, _, path = line.rpartition("; the whole trace is in ")
    assert prefix, line
    assert Path(path).parent == work.parent / "tmp"
    return Path(path).read_bytes()


def _assert_written_elsewhere(result: subprocess.CompletedProcess[str], work: Path) -> str:
    assert result.returncode == 1, result.stderr
    assert result.stdout == "done\n"
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert lines[0] == "heap_profile: program exited with status 0"
    assert len(lines) == 2, result.stderr
    trace = _kept(lines[1], work)
    (dump,) = [d for d in heap_dumps(trace) if d.heap_name == "python"]
    assert dump.totals("prog_keeps")["allocated"] > 0.8 * 4096 * 1000
    return lines[1]


def test_a_full_device_keeps_the_trace_elsewhere(work: Path) -> None:
    result = _heap_profile("-o", "/dev/full", "--", "prog.py", cwd=work, env=_env(work))
    line = _assert_written_elsewhere(result, work)
    assert line.startswith("heap_profile: cannot write /dev/full: No space left on device (0 of ")


@pytest.fixture
def small_disk(work: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs with one page left."""
    mount = work.parent / "small"
    mount.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        with open(mount / "filler", "wb") as f:
            f.write(b"\0" * (60 << 10))
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_a_full_disk_keeps_what_was_written_and_the_whole_trace(
    work: Path, small_disk: Path
) -> None:
    out = small_disk / "h.pftrace"
    result = _heap_profile("-o", str(out), "--", "prog.py", cwd=work, env=_env(work))
    line = _assert_written_elsewhere(result, work)
    written = out.read_bytes()
    assert line.startswith(f"heap_profile: cannot write {out}: No space left on device ")
    assert f"({len(written)} of " in line
    whole = _kept(line, work)
    assert 0 < len(written) < len(whole)
    assert whole.startswith(written)


def test_a_temporary_directory_too_deep_for_a_socket_still_profiles(tmp_path: Path) -> None:
    # a socket's path holds 107 bytes: the daemons' private sockets go to /tmp instead
    deep = tmp_path / ("t" * 60) / ("u" * 60)
    deep.mkdir(parents=True)
    (tmp_path / "prog.py").write_text(PROG)
    env = {**_private_env(tmp_path), "TMPDIR": str(deep)}
    result = _heap_profile("-o", "h.pftrace", "--", "prog.py", cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "done\n"
    trace = (tmp_path / "h.pftrace").read_bytes()
    (dump,) = [d for d in heap_dumps(trace) if d.heap_name == "python"]
    assert dump.totals("prog_keeps")["allocated"] > 0.8 * 4096 * 1000
    assert os.listdir(deep) == []  # its private directory was removed
