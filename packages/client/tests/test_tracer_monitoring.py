"""The recorder on sys.monitoring (3.12+): code not recorded costs nothing after its first
event, generators and coroutines nest across yields and resumes, exceptions carry their type."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from tracer_support import HOOKS, Slice, decode, require_compiled_hook, run_traced

MONITORING = pytest.mark.skipif(
    sys.version_info < (3, 12) or "compiled" not in HOOKS,
    reason="the sys.monitoring recorder is compiled, on 3.12+",
)


@MONITORING
def test_excluded_code_stops_calling_back_after_its_first_event(tmp_path: Path) -> None:
    require_compiled_hook()
    (tmp_path / "noisy.py").write_text(
        "def leaf(i):\n    return abs(i)\ndef loop(n):\n    for i in range(n):\n        leaf(i)\n"
    )
    program = """
import sys
import noisy
from perfetto_client._tracer import _monitor, record
def kept():
    return len("kept")
with record(sys.argv[1], exclude=("noisy",)):
    before = _monitor.callbacks()
    noisy.loop(100_000)
    after = _monitor.callbacks()
    kept()
    recorded = _monitor.callbacks() - after
print(after - before, recorded)
"""
    (tmp_path / "prog.py").write_text(program)
    out = tmp_path / "out.pftrace"
    proc = subprocess.run(
        [sys.executable, "prog.py", str(out)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    # 200,000 calls (leaf, abs): each location calls back once; kept() and len() call back.
    excluded, recorded = map(int, proc.stdout.split())
    assert excluded < 20
    assert recorded >= 4
    trace = decode(out)
    assert trace.problems == []
    names = trace.all_names()
    assert "kept" in names
    assert "len" in names
    assert not [n for n in names if "noisy" in n or n in ("leaf", "loop", "abs")]


@MONITORING
def test_calls_of_python_functions_cost_two_callbacks_and_builtins_stay_recorded(
    tmp_path: Path,
) -> None:
    # The call site of a Python function answers CALL with DISABLE: each later call costs
    # only its PY_START and PY_RETURN; a site calling a builtin keeps its CALL and C_RETURN.
    # (The callback count counts every callback, a CALL answered at once included.)
    require_compiled_hook()
    program = """
import sys
from perfetto_client._tracer import _monitor, record
def leaf(i):
    return i
def python_calls(n):
    for i in range(n):
        leaf(i)
def builtin_calls(n):
    for i in range(n):
        abs(i)
def one_site(functions):
    for f in functions:
        f(-1)
with record(sys.argv[1]):
    start = _monitor.callbacks()
    python_calls(10_000)
    middle = _monitor.callbacks()
    builtin_calls(10_000)
    end = _monitor.callbacks()
    one_site([leaf, abs, hex])
print(middle - start, end - middle)
"""
    (tmp_path / "prog.py").write_text(program)
    out = tmp_path / "out.pftrace"
    proc = subprocess.run(
        [sys.executable, "prog.py", str(out)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    python, builtin = map(int, proc.stdout.split())
    assert 20_000 <= python < 20_100  # PY_START and PY_RETURN of each leaf (was 30,000)
    assert 20_000 <= builtin < 20_100  # CALL and C_RETURN of each abs
    trace = decode(out)
    assert trace.problems == []
    [main] = trace.by_name("MainThread")
    names = main.names()
    assert names.count("leaf") == 10_001
    assert names.count("abs") == 10_000
    [python_calls] = [s for s in main.slices if s.name == "python_calls"]
    assert [c.name for c in python_calls.children] == ["leaf"] * 10_000
    # The price, as documented: a site that called a Python function first records no
    # builtin it calls later.
    [one_site] = [s for s in main.slices if s.name == "one_site"]
    assert [c.name for c in one_site.children] == ["leaf"]


def _parents(slices: list[Slice]) -> dict[int, Slice]:
    return {id(c): s for s in slices for c in s.children}


def _ancestors(s: Slice, parents: dict[int, Slice]) -> list[str]:
    names = []
    while id(s) in parents:
        s = parents[id(s)]
        names.append(s.name)
    return names


@pytest.mark.parametrize("hook", HOOKS)
def test_generators_and_coroutines_nest_across_yields_and_resumes(
    tmp_path: Path, hook: str
) -> None:
    program = """
import asyncio
def numbers(n):
    for i in range(n):
        yield i
def consume():
    return sum(numbers(3))
async def leaf():
    await asyncio.sleep(0)
    return 1
async def node():
    return await leaf() + await leaf()
consume()
asyncio.run(node())
"""
    proc, out = run_traced(tmp_path, program, pure=hook == "pure")
    assert proc.returncode == 0, proc.stderr
    trace = decode(out)
    assert trace.problems == []
    [main] = trace.by_name("MainThread")
    parents = _parents(main.slices)
    numbers = [s for s in main.slices if s.name == "numbers"]
    assert len(numbers) == 4  # three yields and the end
    assert all("consume" in _ancestors(s, parents) for s in numbers)
    # Each leaf suspends once (sleep(0)) and is resumed through node.
    leaves = [s for s in main.slices if s.name == "leaf"]
    assert len(leaves) == 4
    assert all("node" in _ancestors(s, parents) for s in leaves)
    assert len([s for s in main.slices if s.name == "node"]) == 3


@MONITORING
def test_exceptions_carry_their_type_by_default(tmp_path: Path) -> None:
    program = """
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
handles()
"""
    proc, out = run_traced(tmp_path, program)
    assert proc.returncode == 0, proc.stderr
    trace = decode(out)
    assert trace.problems == []
    [main] = trace.by_name("MainThread")
    names = [name for _, name in main.instants if name.startswith("exception")]
    assert names == ["exception Custom", "exception KeyError"]
    [fails] = [s for s in main.slices if s.name == "fails"]
    [custom_ts] = [ts for ts, name in main.instants if name == "exception Custom"]
    assert fails.ts <= custom_ts <= fails.ts + fails.dur
