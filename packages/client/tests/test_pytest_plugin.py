"""`pytest --perfetto OUT.pftrace`: real pytest runs on a test directory written here.

Each run is pytest's own command in a subprocess, from another directory; the trace is read
with upstream's schema for what a user looks at in the UI: a slice per test named by its node
id with `setup`, `call` and `teardown` inside, its outcome, the failure's exception, the
process and thread tracks, and the end-of-run line's numbers.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from perfetto_protos.upstream import parse_upstream_trace
from perfetto_testing import SLOW_TIMEOUT
from trace_model import TraceModel
from tracer_support import decode

PYTEST = str(Path(sys.executable).parent / "pytest")

SAMPLE = """
import pytest


def helper_function(n):
    return sum(range(n))


def test_passes():
    assert helper_function(10) == 45


def test_fails():
    assert helper_function(3) == 4, "helper_function is off"


@pytest.mark.skip(reason="not today")
def test_skipped():
    pass


@pytest.fixture
def broken():
    raise RuntimeError("fixture broke")


def test_errors(broken):
    pass


@pytest.mark.parametrize("n", [1, 2])
def test_param(n):
    assert n
"""
NODE_IDS = {
    "tests/test_sample.py::test_passes": "passed",
    "tests/test_sample.py::test_fails": "failed",
    "tests/test_sample.py::test_skipped": "skipped",
    "tests/test_sample.py::test_errors": "error",
    "tests/test_sample.py::test_param[1]": "passed",
    "tests/test_sample.py::test_param[2]": "passed",
}
WROTE = re.compile(
    r"^perfetto-trace: wrote (?P<path>\S+) \((?P<size>[\d.]+ \w+)\): (?P<events>[\d,]+) events"
    r"(?: from (?P<procs>\d+) processes)?, (?P<lost>.*?), spanning [\d.]+ s",
    re.MULTILINE,
)


@dataclass
class RunSlice:
    name: str
    track: int
    outcome: str | None = None
    children: list[str] = field(default_factory=list)
    instants: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    """(name, the phase it is in, args)."""


def _project(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    (project / "tests").mkdir(parents=True)
    (project / "tests" / "test_sample.py").write_text(SAMPLE)
    return project


def _pytest(
    cwd: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """pytest's own command, as a user runs it (no plugin of the repository's conftest)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    return subprocess.run(
        [PYTEST, "-p", "no:cacheprovider", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=SLOW_TIMEOUT,
        check=False,
        env={**clean, **(env or {})},
    )


def _test_slices(model: TraceModel) -> dict[str, RunSlice]:
    """The slices whose name is a node id, with their phases, end args and instants."""
    out: dict[str, RunSlice] = {}
    stacks: dict[int, list[tuple[str, RunSlice | None]]] = {}
    for event in sorted(model.events, key=lambda e: e.ts):
        stack = stacks.setdefault(event.track, [])
        if event.kind == "B":
            test = stack[0][1] if stack else None
            if "::" in event.name and not stack:
                test = out[event.name] = RunSlice(event.name, event.track)
            elif test is not None and len(stack) == 1:
                test.children.append(event.name)
            stack.append((event.name, test))
        elif event.kind == "E":
            name, test = stack.pop()
            if test is not None and name == test.name:
                test.outcome = event.args.get("outcome")
        elif event.kind == "I" and stack and stack[0][1] is not None:
            test = stack[0][1]
            assert test is not None
            test.instants.append((event.name, stack[-1][0], event.args))
    assert all(not stack for stack in stacks.values()), "a slice never ended"
    return out


def _wrote(output: str) -> re.Match[str]:
    match = WROTE.search(output)
    assert match is not None, output
    return match


def test_each_test_is_a_slice_with_its_phases_and_outcome(tmp_path: Path) -> None:
    project = _project(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = elsewhere / "run.pftrace"

    result = _pytest(project, "--perfetto", str(out), "tests")

    assert result.returncode == 1, result.stdout + result.stderr  # test_fails failed
    assert "Traceback" not in result.stderr
    wrote = _wrote(result.stdout)
    assert wrote["path"] == str(out)
    assert wrote["lost"] == "0 lost"
    model = TraceModel(out.read_bytes())
    assert int(wrote["events"].replace(",", "")) == len(model.events)
    assert f"open it by dragging {out} into https://ui.perfetto.dev" in result.stdout

    tests = _test_slices(model)
    assert {name: t.outcome for name, t in tests.items()} == NODE_IDS
    assert tests["tests/test_sample.py::test_passes"].children == ["setup", "call", "teardown"]
    assert tests["tests/test_sample.py::test_fails"].children == ["setup", "call", "teardown"]
    # A failing setup: pytest runs no call, only the teardown.
    assert tests["tests/test_sample.py::test_errors"].children == ["setup", "teardown"]
    [(name, phase, args)] = tests["tests/test_sample.py::test_fails"].instants
    assert (name, phase) == ("AssertionError", "call")
    assert args["message"].startswith("helper_function is off")
    [(name, phase, args)] = tests["tests/test_sample.py::test_errors"].instants
    assert (name, phase, args) == ("RuntimeError", "setup", {"message": "fixture broke"})
    assert tests["tests/test_sample.py::test_skipped"].instants == []  # a skip is no failure
    assert not any(t.instants for n, t in tests.items() if NODE_IDS[n] == "passed")

    # Every test on the main thread's track, under the pytest process.
    [track] = {t.track for t in tests.values()}
    desc = model.tracks[track]
    assert desc.thread.thread_name == "MainThread"
    processes = [d for d in model.tracks.values() if d.HasField("process")]
    assert [(p.process.process_name, p.uuid) for p in processes] == [("pytest", desc.parent_uuid)]
    assert "collection" in [e.name for e in model.events if e.kind == "B"]


def test_calls_nest_in_the_test_slices(tmp_path: Path) -> None:
    project = _project(tmp_path)
    out = tmp_path / "calls.pftrace"

    result = _pytest(
        project, "--perfetto", str(out), "--perfetto-calls", "tests/test_sample.py::test_passes"
    )

    assert result.returncode == 0, result.stdout + result.stderr
    wrote = _wrote(result.stdout)
    assert wrote["lost"] == "0 lost"
    decoded = decode(out)
    assert decoded.problems == []
    [main] = decoded.by_name("MainThread")
    [test] = [s for s in main.slices if s.name == "tests/test_sample.py::test_passes"]
    assert test.depth > 0  # inside pytest's own calls (main, the hooks)

    def below(s: Any) -> list[Any]:
        return [c for child in s.children for c in [child, *below(child)]]

    # The phases inside the test (with pytest's hook calls in between), the test's own
    # functions inside its call.
    phases = [s for s in below(test) if s.name in ("setup", "call", "teardown")]
    assert [s.name for s in phases] == ["setup", "call", "teardown"]
    inside_call = [s.name for s in below(phases[1])]
    assert "test_sample.test_passes" in inside_call
    assert "test_sample.helper_function" in inside_call
    events = sum(len(t.slices) + len(t.instants) for t in decoded.threads.values())
    assert events * 2 >= int(wrote["events"].replace(",", "")) >= events


def test_without_the_flag_only_the_options_are_added(tmp_path: Path) -> None:
    project = _project(tmp_path)
    (project / "tests" / "test_loaded.py").write_text(
        "import sys\n\n\n"
        "def test_nothing_of_the_recorder_is_loaded():\n"
        "    assert 'perfetto_client.pytest_plugin' in sys.modules\n"
        "    assert 'perfetto_client._tracer._test_run' not in sys.modules\n"
        "    assert 'perfetto_client._tracer' not in sys.modules\n"
    )

    result = _pytest(project, "tests/test_loaded.py")
    helped = _pytest(project, "--help")
    disabled = _pytest(project, "-p", "no:perfetto", "--help")

    assert result.returncode == 0, result.stdout + result.stderr
    assert "perfetto-trace" not in result.stdout + result.stderr
    assert sorted(p.name for p in project.iterdir()) == ["tests"]
    assert "--perfetto=OUT.pftrace" in helped.stdout
    assert "--perfetto-calls" in helped.stdout
    assert disabled.returncode == 0
    assert "--perfetto" not in disabled.stdout


def test_recording_loads_no_protobuf(tmp_path: Path) -> None:
    """The sequences describe their clock, thread and process without protobuf's classes,
    whose import would cost more than a small test run."""
    project = _project(tmp_path)
    (project / "tests" / "test_loaded.py").write_text(
        "import sys\n\n\n"
        "def test_recorded_without_protobuf():\n"
        "    assert 'perfetto_client._tracer._test_run' in sys.modules\n"
        "    assert 'google.protobuf' not in sys.modules\n"
    )
    out = tmp_path / "run.pftrace"

    result = _pytest(project, "--perfetto", str(out), "tests/test_loaded.py")

    assert result.returncode == 0, result.stdout + result.stderr
    assert _wrote(result.stdout)["lost"] == "0 lost"
    model = TraceModel(out.read_bytes())
    tests = _test_slices(model)
    test = tests["tests/test_loaded.py::test_recorded_without_protobuf"]
    assert (test.outcome, test.children) == ("passed", ["setup", "call", "teardown"])
    desc = model.tracks[test.track]
    assert desc.thread.thread_name == "MainThread"
    processes = [d for d in model.tracks.values() if d.HasField("process")]
    assert [(p.process.process_name, p.uuid) for p in processes] == [("pytest", desc.parent_uuid)]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--perfetto-calls"], "ERROR: --perfetto-calls needs --perfetto OUT.pftrace"),
        (["--perfetto", "no/such/dir/out.pftrace"], "ERROR: --perfetto: can't write"),
    ],
)
def test_a_mistake_is_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    project = _project(tmp_path)

    result = _pytest(project, *args, "tests")

    assert result.returncode == 4  # pytest's usage error
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().startswith(message), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_trace_that_cannot_be_written_fails_the_run(tmp_path: Path) -> None:
    project = _project(tmp_path)

    result = _pytest(project, "--perfetto", "/dev/full", "tests/test_sample.py::test_passes")

    assert result.returncode == 3, result.stdout + result.stderr  # the test passed
    assert "Traceback" not in result.stdout + result.stderr
    wrote = _wrote(result.stdout)
    assert (wrote["size"], wrote["events"]) == ("0 bytes", "0")
    # collection, the test and its three phases: each a begin and an end
    assert wrote["lost"] == (
        "10 lost (recording stopped: writing /dev/full: No space left on device; "
        "the trace is incomplete)"
    )
    assert "open it by dragging" not in result.stdout


@pytest.mark.skipif(importlib.util.find_spec("xdist") is None, reason="pytest-xdist not installed")
def test_xdist_workers_make_one_trace(tmp_path: Path) -> None:
    project = _project(tmp_path)
    out = project / "xdist.pftrace"

    result = _pytest(project, "-n", "2", "--perfetto", "xdist.pftrace", "tests")

    assert result.returncode == 1, result.stdout + result.stderr
    wrote = _wrote(result.stdout)
    assert wrote["path"] == str(out)
    assert wrote["procs"] == "2"
    assert wrote["lost"] == "0 lost"
    assert sorted(p.name for p in project.iterdir()) == ["tests", "xdist.pftrace"]  # no parts
    model = TraceModel(out.read_bytes())
    assert int(wrote["events"].replace(",", "")) == len(model.events)
    tests = _test_slices(model)
    assert {name: t.outcome for name, t in tests.items()} == NODE_IDS
    names = {d.uuid: d.process.process_name for d in model.tracks.values() if d.HasField("process")}
    assert sorted(names.values()) == ["pytest-xdist worker gw0", "pytest-xdist worker gw1"]
    processes_used = {model.tracks[t.track].parent_uuid for t in tests.values()}
    assert processes_used <= set(names)


def test_asyncio_imported_after_the_first_event_still_gives_tasks_their_tracks(
    tmp_path: Path,
) -> None:
    """An event recorded before asyncio is imported does not stop later events in a running
    event loop from going on their task's track."""
    project = _project(tmp_path)
    (project / "tests" / "test_late_asyncio.py").write_text(
        "import sys\n\n"
        "import perfetto_client as pc\n\n\n"
        "def test_asyncio_after_an_event():\n"
        "    assert 'asyncio' not in sys.modules\n"
        "    pc.instant('app', 'before asyncio')\n"
        "    import asyncio\n\n"
        "    async def main():\n"
        "        pc.instant('app', 'in the loop')\n\n"
        "    asyncio.run(main())\n"
        "    pc.instant('app', 'after the loop')\n"
    )
    out = tmp_path / "late.pftrace"

    result = _pytest(project, "--perfetto", str(out), "tests/test_late_asyncio.py")

    assert result.returncode == 0, result.stdout + result.stderr
    assert _wrote(result.stdout)["lost"] == "0 lost"
    model = TraceModel(out.read_bytes())
    tracks = {e.name: e.track for e in model.events if e.kind == "I"}
    main_thread = tracks["before asyncio"]
    assert model.tracks[main_thread].thread.thread_name == "MainThread"
    assert tracks["after the loop"] == main_thread
    assert tracks["in the loop"] != main_thread
    assert model.tracks[tracks["in the loop"]].name.startswith("task ")


def _many_calls(tmp_path: Path) -> Path:
    """A project of 20 tests of 10,000 calls each: some 12 MiB with --perfetto-calls."""
    project = tmp_path / "project"
    (project / "tests").mkdir(parents=True)
    (project / "tests" / "test_many.py").write_text(
        "import pytest\n\n\ndef leaf(i):\n    return i\n\n\n"
        "@pytest.mark.parametrize('n', range(20))\n"
        "def test_calls(n):\n    assert sum(leaf(i) for i in range(10_000)) == 49_995_000\n"
    )
    return project


def test_the_size_cap_cuts_a_calls_trace_and_fails_the_run(tmp_path: Path) -> None:
    project = _many_calls(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = elsewhere / "run.pftrace"

    result = _pytest(
        project,
        "-p",
        "no:randomly",
        "--perfetto",
        str(out),
        "--perfetto-calls",
        "--perfetto-max-size",
        "3",
        "tests",
    )

    assert result.returncode == 3, result.stdout + result.stderr  # passed, the trace partial
    assert "20 passed" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr
    assert 2 << 20 <= out.stat().st_size <= 3 << 20
    wrote = _wrote(result.stdout)
    cut = re.fullmatch(
        r"(?P<lost>[\d,]+) lost \(the size cap of 3 MiB was reached [\d.]+ s in: "
        r"(?P<dropped>[\d.,]+) MiB not written; the trace is partial\)",
        wrote["lost"],
    )
    assert cut is not None, wrote["lost"]
    assert int(cut["lost"].replace(",", "")) > 100_000
    assert float(cut["dropped"]) > 2
    trace: Any = parse_upstream_trace(out.read_bytes())  # upstream's schema reads it all
    events = sum(packet.HasField("track_event") for packet in trace.packet)
    assert int(wrote["events"].replace(",", "")) == events
    decoded = decode(out)  # and it means what it meant up to the cut
    assert "test_many.leaf" in {name for t in decoded.threads.values() for name in t.names()}
    assert all(problem.endswith("never ended") for problem in decoded.problems)


def test_the_size_cap_takes_a_size_in_mb(tmp_path: Path) -> None:
    result = _pytest(
        _project(tmp_path), "--perfetto", "t.pftrace", "--perfetto-max-size", "-3", "tests"
    )
    assert result.returncode == 4
    assert "--perfetto-max-size: takes a size in MB (0: no cap), not '-3'" in result.stderr
    assert "Traceback" not in result.stdout + result.stderr


@pytest.mark.skipif(importlib.util.find_spec("xdist") is None, reason="pytest-xdist not installed")
def test_the_size_cap_holds_for_xdist_workers_joined(tmp_path: Path) -> None:
    project = _many_calls(tmp_path)

    result = _pytest(
        project,
        "-p",
        "no:randomly",
        "-n",
        "2",
        "--perfetto",
        "run.pftrace",
        "--perfetto-calls",
        "--perfetto-max-size",
        "3",
        "tests",
    )

    assert result.returncode == 3, result.stdout + result.stderr
    out = project / "run.pftrace"
    assert 2 << 20 <= out.stat().st_size <= 3 << 20  # one worker's part: two would not fit
    assert sorted(p.name for p in project.iterdir()) == ["run.pftrace", "tests"]  # no parts
    wrote = _wrote(result.stdout)
    assert wrote["procs"] is None
    assert "gw0: the size cap of 3 MiB was reached" in wrote["lost"]
    assert "gw1: the size cap of 3 MiB was reached" in wrote["lost"]
    assert wrote["lost"].endswith("MiB not written; the trace is partial)")
    trace: Any = parse_upstream_trace(out.read_bytes())
    events = sum(packet.HasField("track_event") for packet in trace.packet)
    assert int(wrote["events"].replace(",", "")) == events
