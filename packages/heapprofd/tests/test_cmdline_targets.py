"""`process_cmdline` finds a Python program by its script, however a person starts it."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hp_testlib import Stack, config_for, heap_dumps, iter_processes, record
from perfetto_testing import TIMEOUT

VICTIM = """\
import sys
import heapprofd.client as client
print("READY", flush=True)
sys.stdin.readline()
if not client.wait_until_profiling(30):
    print("NOT PROFILED", flush=True)
    sys.exit(3)
def victim_keeps():
    return [bytearray(1000) for _ in range(2048)]
kept = victim_keeps()
print("PROFILED", flush=True)
"""


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    running = Stack(str(tmp_path_factory.mktemp("hp")))
    yield running
    running.close()


def _profile(stack: Stack, argv: list[str], cwd: Path, pattern: str, running: bool) -> None:
    """Runs `argv` in `cwd` during a session for `pattern`: started before the session
    (`running`: the daemon signals it) or during it (it connects at its start)."""
    env = dict(stack.env)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    config = config_for([])
    config.data_sources[0].config.heapprofd_config.process_cmdline.append(pattern)
    started: list[subprocess.Popen[str]] = []

    def start() -> subprocess.Popen[str]:
        program = subprocess.Popen(
            argv, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        started.append(program)
        assert program.stdout is not None
        assert program.stdout.readline() == "READY\n"
        return program

    outputs: list[str] = []

    def during() -> None:
        program = started[0] if running else start()
        out, _ = program.communicate("\n", timeout=TIMEOUT)
        outputs.append(out)

    try:
        if running:
            start()
        trace = record(stack, config, during)
    finally:
        for program in started:
            if program.poll() is None:
                program.kill()
            program.communicate()
    assert outputs == ["PROFILED\n"], (argv, stack.logs())
    assert started[0].returncode == 0
    (dump,) = iter_processes(heap_dumps(trace), started[0].pid)
    assert dump.flags["from_startup"] is not running
    assert dump.totals("victim_keeps")["allocated"] > 0.8 * 2048 * 1000


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    (tmp_path / "app").mkdir()
    (tmp_path / "elsewhere").mkdir()
    path = tmp_path / "app" / "victim.py"
    path.write_text(VICTIM)
    return path


def test_heapprofd_run_script_is_matched_by_the_script_name(stack: Stack, victim: Path) -> None:
    _profile(stack, ["heapprofd", "run", "victim.py"], victim.parent, "victim.py", False)


def test_heapprofd_run_is_matched_when_signalled_too(stack: Stack, victim: Path) -> None:
    _profile(stack, ["heapprofd", "run", "--", "victim.py"], victim.parent, "vict*.py", True)


def test_python_script_is_matched_by_the_script_name(stack: Stack, victim: Path) -> None:
    _profile(stack, ["python", "victim.py"], victim.parent, "victim.py", True)


def test_a_path_from_another_directory_is_matched_by_name(stack: Stack, victim: Path) -> None:
    elsewhere = victim.parent.parent / "elsewhere"
    _profile(stack, ["heapprofd", "run", str(victim)], elsewhere, "victim.py", False)
    _profile(stack, ["python", "-u", "../app/victim.py"], elsewhere, "victim.py", True)


def test_an_absolute_pattern_matches_a_relative_script(stack: Stack, victim: Path) -> None:
    elsewhere = victim.parent.parent / "elsewhere"
    _profile(stack, ["heapprofd", "run", "../app/victim.py"], elsewhere, str(victim), False)
    _profile(stack, ["python", "victim.py"], victim.parent, str(victim.parent / "*.py"), True)
