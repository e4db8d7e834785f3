"""The compiled recorder and the pure one, driven by the same drawn programs, write the same calls.

Each example is a program drawn as a plan (Python calls, builtins, generators, exceptions
caught, loops long enough to fill a ring batch) run under `record` in both builds with the
same drawn options; the decoded slices (name and depth, in order) and the event counts are
compared. The compiled recorder's fast path (the common call and return) and its general
path meet wherever an option, a hand-off or the tracer's own frames apply.
"""

from __future__ import annotations

import contextlib
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from perfetto_client._tracer import record
from tracer_support import HOOKS, decode, require_compiled_hook

Plan = list[Any]


def alpha(plan: Plan) -> None:
    run(plan)


def beta(plan: Plan) -> None:
    run(plan)


def leaf() -> None:
    return None


def failing(plan: Plan) -> None:
    run(plan)
    raise ValueError("planned")


def counting(n: int) -> Any:
    yield from range(n)


def builtins_of(which: int) -> None:
    if which == 0:
        len("abc")
    elif which == 1:
        sorted([3, 1, 2])
    elif which == 2:
        "a".upper()  # a method descriptor called with its object
    else:
        with contextlib.suppress(ValueError):
            math.sqrt(-1.0)  # a builtin that raises


def run(plan: Plan) -> None:
    for step in plan:
        kind = step[0]
        if kind == "call":
            (alpha if step[1] else beta)(step[2])
        elif kind == "builtin":
            builtins_of(step[1])
        elif kind == "generator":
            for _ in counting(step[1]):
                pass
        elif kind == "raise":
            with contextlib.suppress(ValueError):
                failing(step[1])
        else:
            for _ in range(step[1]):
                leaf()


def _steps(children: st.SearchStrategy[Plan]) -> st.SearchStrategy[Plan]:
    step = st.one_of(
        st.tuples(st.just("call"), st.booleans(), children),
        st.tuples(st.just("raise"), children),
    )
    return st.lists(step, max_size=4)


_leaves = st.one_of(
    st.tuples(st.just("builtin"), st.integers(0, 3)),
    st.tuples(st.just("generator"), st.integers(0, 3)),
    st.tuples(st.just("loop"), st.integers(1, 50)),
)
plans = st.recursive(st.lists(_leaves, max_size=4), _steps, max_leaves=12)


def _recorded(tmp: Path, build: str, plan: Plan, options: dict[str, Any]) -> tuple[Any, int]:
    out = tmp / f"{build}.pftrace"
    with record(out, pure=build == "pure", gc=False, exceptions=False, **options) as rec:
        run(plan)
    assert rec.summary is not None
    trace = decode(out)
    assert trace.problems == []
    [main] = trace.threads.values()
    return [(s.depth, s.name) for s in main.slices], rec.summary.events_written


@pytest.mark.skipif("compiled" not in HOOKS, reason="PERFETTO_PY_PURE=1: one build only")
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    plan=plans,
    options=st.fixed_dictionaries(
        {
            "max_depth": st.sampled_from([0, 0, 2, 5]),
            "c_calls": st.booleans(),
            "ring_mb": st.sampled_from([0.0, 4.0]),
        }
    ),
    calls_after=st.sampled_from([0, 9000]),
)
def test_both_builds_record_the_same_calls(
    tmp_path: Path, plan: Plan, options: dict[str, Any], calls_after: int
) -> None:
    require_compiled_hook()
    # With a ring, 9000 calls after the plan fill a 64 KiB batch: the next batch interns
    # its names again.
    plan = [*plan, ("loop", calls_after)]
    compiled = _recorded(tmp_path, "compiled", plan, options)
    pure = _recorded(tmp_path, "pure", plan, options)
    assert compiled == pure
    slices, events = compiled
    assert events == 2 * len(slices)
    assert slices[0] == (0, f"{__name__}.run")
