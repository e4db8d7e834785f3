"""perfetto-trace on real programs: what a user sees in the trace and on the terminal."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tracer_support import (
    HOOKS,
    Slice,
    decode,
    end,
    program_stderr,
    run_plain,
    run_traced,
)

FIB = """
import sys
def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)
print(fib(int(sys.argv[1])))
"""


def _fib_calls(n: int) -> int:
    return 1 if n < 2 else 1 + _fib_calls(n - 1) + _fib_calls(n - 2)


def _check_fib_tree(s: Slice, n: int) -> None:
    assert s.name == "fib"
    kids = [c for c in s.children if c.name == "fib"]
    if n < 2:
        assert kids == []
    else:
        assert len(kids) == 2
        _check_fib_tree(kids[0], n - 1)
        _check_fib_tree(kids[1], n - 2)
    for c in s.children:
        assert s.ts <= c.ts
        assert c.ts + c.dur <= s.ts + s.dur


@pytest.mark.parametrize("hook", HOOKS)
def test_every_call_is_a_nested_slice(tmp_path: Path, hook: str) -> None:
    proc, out = run_traced(tmp_path, FIB, "12", pure=hook == "pure")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "144\n"
    trace = decode(out)
    assert trace.problems == []
    [main] = trace.by_name("MainThread")
    [module] = main.program_roots()
    assert module.name == "<module __main__>"
    assert module.file.endswith("prog.py")
    fibs = [s for s in main.slices if s.name == "fib"]
    assert len(fibs) == _fib_calls(12)
    top = next(c for c in module.children if c.name == "fib")
    _check_fib_tree(top, 12)
    assert top.line == 3
    # Builtin functions the program calls are recorded too.
    assert "print" in {c.name for c in module.children}


@pytest.mark.parametrize("hook", HOOKS)
def test_threads_get_their_own_named_tracks(tmp_path: Path, hook: str) -> None:
    program = """
import threading
def work(n):
    return sum(square(i) for i in range(n))
def square(i):
    return i * i
threads = [threading.Thread(target=work, args=(10 + k,), name=f"worker-{k}") for k in range(3)]
for t in threads: t.start()
for t in threads: t.join()
"""
    proc, out = run_traced(tmp_path, program, pure=hook == "pure")
    assert proc.returncode == 0, proc.stderr
    trace = decode(out)
    assert trace.problems == []
    for k in range(3):
        [thread] = trace.by_name(f"worker-{k}")
        assert thread.tid != 0
        squares = [s for s in thread.slices if s.name == "square"]
        assert len(squares) == 10 + k
        assert all(s.depth > 0 for s in squares)
        assert "work" in thread.names()
    [main] = trace.by_name("MainThread")
    assert "square" not in main.names()


def test_exit_code_stdout_and_stderr_are_the_programs(tmp_path: Path) -> None:
    program = """
import sys
print("argv", sys.argv[1:], __name__, sys.modules["__main__"].__file__ == __file__)
print("to stderr", file=sys.stderr)
sys.exit(3)
"""
    plain = run_plain(tmp_path, program, "a", "--b")
    proc, out = run_traced(tmp_path, program, "a", "--b")
    assert plain.returncode == proc.returncode == 3
    assert proc.stdout == plain.stdout == "argv ['a', '--b'] __main__ True\n"
    assert program_stderr(proc.stderr) == plain.stderr
    assert f"wrote {out}" in proc.stderr
    assert "ui.perfetto.dev" in proc.stderr
    assert decode(out).problems == []


def test_exceptions_are_instants_with_their_type(tmp_path: Path) -> None:
    program = """
import json
class Custom(Exception):
    pass
def fails():
    raise Custom("x")
def handles():
    try:
        fails()
    except Custom:
        pass
    try:
        {}["missing"]
    except KeyError:
        pass
    try:
        json.loads("{")
    except ValueError:
        pass
handles()
"""
    proc, out = run_traced(tmp_path, program, options=("--exception-types",))
    assert proc.returncode == 0, proc.stderr
    trace = decode(out)
    assert trace.problems == []
    [main] = trace.by_name("MainThread")
    # Those of handles() (the program's `import json` raises and catches some of its own).
    [call] = [s for s in main.slices if s.name == "handles"]
    names = [
        name
        for ts, name in main.instants
        if name.startswith("exception") and call.ts <= ts <= call.ts + call.dur
    ]
    if "compiled" not in HOOKS:
        assert names == []  # the pure hook cannot see exceptions
        return
    # One per exception, where it was raised (json's error is raised inside json).
    assert names == [
        "exception Custom",
        "exception KeyError",
        "exception json.decoder.JSONDecodeError",
    ]


@pytest.mark.parametrize("hook", HOOKS)
def test_an_escaping_exception_looks_as_without_the_tracer(tmp_path: Path, hook: str) -> None:
    program = """
def inner():
    raise ValueError("bad value")
def outer():
    inner()
try:
    inner()
except ValueError:
    pass
outer()
"""
    plain = run_plain(tmp_path, program)
    proc, out = run_traced(tmp_path, program, pure=hook == "pure")
    assert plain.returncode == proc.returncode == 1
    assert program_stderr(proc.stderr) == plain.stderr
    assert "perfetto_client" not in program_stderr(proc.stderr)
    trace = decode(out)
    assert trace.problems == []
    [main] = trace.by_name("MainThread")
    names = [name for _, name in main.instants]
    assert "uncaught ValueError: bad value" in names
    if hook == "compiled":
        # Where each exception started unwinding (without --exception-types: no type), or,
        # on sys.monitoring (3.12+), where it was raised, with its type.
        expected = "exception ValueError" if sys.version_info >= (3, 12) else "exception"
        raised = [ts for ts, name in main.instants if name == expected]
        assert len(raised) == 2
        inners = [s for s in main.slices if s.name == "inner"]
        assert [any(s.ts <= ts <= s.ts + s.dur for s in inners) for ts in raised] == [True] * 2
    module = main.program_roots()[0]
    assert [c.name for c in module.children if c.name in ("inner", "outer")] == ["inner", "outer"]


def test_module_mode_runs_the_module_as_main(tmp_path: Path) -> None:
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "__main__.py").write_text(
        "import sys\ndef hello():\n    print('hi', sys.argv[1:], __name__)\nhello()\n"
    )
    out = tmp_path / "m.pftrace"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "perfetto_client._tracer",
            "run",
            "-o",
            str(out),
            "-m",
            "mypkg",
            "x",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "hi ['x'] __main__\n"
    trace = decode(out)
    assert "hello" in trace.all_names()


def test_asyncio_coroutines_are_recorded(tmp_path: Path) -> None:
    program = """
import asyncio
async def leaf(i):
    await asyncio.sleep(0)
    return i
async def main():
    return sum(await asyncio.gather(*(leaf(i) for i in range(5))))
print(asyncio.run(main()))
"""
    proc, out = run_traced(tmp_path, program)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "10\n"
    trace = decode(out)
    assert trace.problems == []
    names = trace.all_names()
    # Each step of a coroutine is a slice: leaf runs twice (before and after its await).
    assert names.count("leaf") == 10
    assert "main" in names
    assert "asyncio.runners.run" in names


def test_gc_runs_are_slices(tmp_path: Path) -> None:
    program = "import gc\ndef collect():\n    gc.collect()\ncollect()\n"
    proc, out = run_traced(tmp_path, program)
    assert proc.returncode == 0, proc.stderr
    [main] = decode(out).by_name("MainThread")
    [collect] = [s for s in main.slices if s.name == "collect"]
    [builtin] = collect.children
    assert builtin.name == "gc.collect"
    assert [c.name for c in builtin.children] == ["gc (generation 2)"]


def test_bad_input_is_one_line(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "perfetto_client._tracer", "run"]
    for args in (
        ["missing.py"],
        ["--min-duration", "soon", "x.py"],
        ["--max-depth", "0", "x.py"],
        [],
        ["-m", "no_such_module_here"],
    ):
        proc = subprocess.run(
            [*cmd, *args], cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False
        )
        assert proc.returncode == 1, args
        assert proc.stderr.count("\n") == 1, proc.stderr
        assert proc.stderr.startswith("perfetto-trace: "), proc.stderr


def test_sigterm_finishes_the_trace(tmp_path: Path) -> None:
    program = """
import sys, time
def tick():
    time.sleep(0.01)
print("ready", flush=True)
while True:
    tick()
"""
    script = tmp_path / "prog.py"
    script.write_text(program)
    out = tmp_path / "out.pftrace"
    proc = subprocess.Popen(
        [sys.executable, "-m", "perfetto_client._tracer", "run", "-o", str(out), str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "ready\n"
        time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
    finally:
        end(proc)
    assert proc.returncode == -signal.SIGTERM
    assert "wrote" in stderr
    trace = decode(out)
    assert trace.problems == []
    assert "tick" in trace.all_names()


def test_duration_stops_the_program(tmp_path: Path) -> None:
    program = "import time\ndef tick():\n    time.sleep(0.01)\nwhile True:\n    tick()\n"
    proc, out = run_traced(tmp_path, program, options=("--duration", "0.3"))
    assert "stopped the program after 0.3 s" in proc.stderr
    trace = decode(out)
    assert trace.problems == []
    assert "tick" in trace.all_names()


def test_the_programs_own_track_events_share_its_thread_track(tmp_path: Path) -> None:
    program = """
import perfetto_client as pc
from perfetto_client import Tracing
def work():
    with pc.trace_event("app", "phase one", n=3):
        return sum(range(10))
Tracing.initialize()
work()
"""
    proc, out = run_traced(tmp_path, program)
    assert proc.returncode == 0, proc.stderr
    trace = decode(out)
    assert trace.problems == []
    [main] = trace.by_name("MainThread")
    [work] = [s for s in main.slices if s.name == "work"]
    assert [c.name for c in work.children if c.name == "phase one"] == ["phase one"]
    # The tracing library itself is not recorded, nor its service's thread.
    assert not [n for n in trace.all_names() if n.startswith(("perfetto_", "protozero"))]
    assert trace.by_name("perfetto-service") == []
    assert not list(tmp_path.glob(".perfetto-trace-client-*"))
