"""`tools/dev.py`, the README's set-up commands, as a user runs them from elsewhere."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from perfetto_protos.upstream import parse_upstream_trace

ROOT = Path(__file__).resolve().parent.parent


def test_dev_trace_runs_the_program_where_the_caller_is(tmp_path: Path) -> None:
    (tmp_path / "prog.py").write_text("import os\ndef work():\n    print(os.getcwd())\nwork()\n")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "dev.py"), "trace", "prog.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == str(tmp_path)
    trace = tmp_path / "trace.pftrace"
    assert f"wrote {trace} (" in proc.stderr
    parsed: Any = parse_upstream_trace(trace.read_bytes())
    packets = parsed.packet
    names = {n.name for packet in packets for n in packet.interned_data.event_names}
    assert any(name.split(".")[-1] == "work" for name in names), names
    assert not (ROOT / "prog.py").exists()


def _fresh_clone(directory: Path) -> Path:
    """The checkout's files (tracked, and new ones not ignored) copied into `directory`, as a
    fresh clone of this tree: no `.venv/`, no `.tools/`, nothing built."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
        timeout=60,
    )
    for name in listed.stdout.decode().split("\0"):
        if name and (ROOT / name).is_file():
            (directory / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, directory / name)
    return directory


def test_dev_trace_on_a_fresh_clone_installs_no_dev_tools(tmp_path: Path) -> None:
    clone = _fresh_clone(tmp_path / "clone")
    (tmp_path / "prog.py").write_text("def work():\n    pass\nwork()\n")
    # Nothing compiled (the compilation's own cost is measured in README.md, not here).
    env = {**os.environ, "PERFETTO_PY_NO_BUILD": "1"}
    env.pop("VIRTUAL_ENV", None)
    proc = subprocess.run(
        [sys.executable, str(clone / "tools" / "dev.py"), "trace", "prog.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"wrote {tmp_path / 'trace.pftrace'} (" in proc.stderr
    assert not (clone / ".tools").exists(), "poetry was installed"
    installed = {p.name.split("-")[0].lower() for p in clone.glob(".venv/lib/*/site-packages/*")}
    assert {"mypy", "ruff", "nox", "pytest", "grpcio_tools", "viztracer"}.isdisjoint(installed)
    assert {"perfetto_client", "perfetto_service", "protobuf", "cython"} <= installed
    assert not any(clone.glob(".venv/lib/*/site-packages/perfetto_cmd*"))


def test_every_session_dev_test_runs_exists() -> None:
    # each phase's lanes name nox sessions, some by version (`install_check@3.11`), also those
    # that nox does not run by default; each names one that nox lists
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import dev
    finally:
        sys.path.remove(str(ROOT / "tools"))
    selected = []
    for _, lanes in dev.TEST_PHASES:
        for selectors in lanes.values():
            for selector in selectors:
                name, _, python = selector.partition("@")
                sessions = dev._nox_sessions([selector])
                assert sessions, selector
                assert all(s == name or s.startswith(f"{name}(") for s in sessions), sessions
                assert not python or all(f"python='{python}'" in s for s in sessions), sessions
                selected += sessions
    listed = subprocess.run(
        ["nox", "-l", "--json", "-s", *selected],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert listed.returncode == 0, listed.stderr
    known = {key for s in json.loads(listed.stdout) for key in (s["session"], s["name"])}
    assert set(selected) <= known, sorted(set(selected) - known)


def _run_lanes(programs: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`dev.run_lanes` run in a process of its own, each lane a Python program."""
    commands = {lane: [sys.executable, "-c", program] for lane, program in programs.items()}
    script = (
        "import sys; sys.path.insert(0, 'tools'); import dev\n"
        f"sys.exit(dev.run_lanes({commands!r}))\n"
    )
    return subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_each_lane_says_when_it_ended_and_the_cpu_it_and_its_children_used() -> None:
    # `dev.py test` prints these lines, and the README's CI times are read from them: the lane
    # that burns a second of CPU in a grandchild says so, the one that sleeps says ~0, and
    # each says its end when it ends, not when the other does
    burn = "import time\nend = time.process_time() + 1.5\nwhile time.process_time() < end: pass\n"
    child = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {burn!r}], check=True)"
    sleep = "import time; time.sleep(0.3); print('slept')"
    proc = _run_lanes({"burn": child, "sleep": sleep})
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.startswith("dev: lane")]
    assert [line.split()[2] for line in lines] == ["sleep", "burn"], proc.stdout
    assert "[sleep] slept" in proc.stdout
    sleep_cpu, burn_cpu = (float(line.split(", ")[1].split()[0]) for line in lines)
    assert burn_cpu >= 0.02, lines  # 1.5 s of the grandchild's CPU, in minutes (0.025)
    assert sleep_cpu < 0.01, lines


def test_run_lanes_repeats_the_failure_lines_after_every_lane_ended() -> None:
    """The lines naming a failed test or session come again at the end, where a log's tail
    shows them, and the failing lane's status is the result."""
    failing = (
        "print('FAILED tests/test_x.py::test_y - assert 1 == 2');"
        "print('nox > Session suite(build=\\'pure\\') failed: Returned code 1');"
        "print('nox > Session lint was successful'); raise SystemExit(3)"
    )
    passing = "import time; time.sleep(0.5); print('ERRORS are fine here')"
    proc = _run_lanes({"A": failing, "B": passing})
    assert proc.returncode == 3, proc.stdout + proc.stderr
    tail = proc.stdout.splitlines()[-2:]
    assert tail == [
        "dev: failed: [A] FAILED tests/test_x.py::test_y - assert 1 == 2",
        "dev: failed: [A] nox > Session suite(build='pure') failed: Returned code 1",
    ], proc.stdout
