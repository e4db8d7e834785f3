"""Property test: random sequences of API calls decode to the events the calls describe."""

from __future__ import annotations

from typing import Any

import perfetto_client as pc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from in_process_recording import record_in_process
from perfetto_client._track_event import thread_state

CAT = pc.Category("test.property")
TRACKS = {name: pc.CounterTrack(f"property {name}") for name in ("a", "b")}

names = st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=12)
scalars = st.one_of(
    st.booleans(),
    st.integers(min_value=-(1 << 63), max_value=(1 << 64) - 1),
    st.floats(allow_nan=False),
    st.text(st.characters(exclude_categories=["Cs"]), max_size=20),
    st.none(),
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(names, inner, max_size=3),
    max_leaves=6,
)
arg_names = st.sampled_from(["a", "b", "count", "name", "x y", "ünï"])
args = st.dictionaries(arg_names, values, max_size=3)
ops = st.lists(
    st.one_of(
        st.tuples(st.just("begin"), names, args),
        st.tuples(st.just("end")),
        st.tuples(st.just("instant"), names, args),
        st.tuples(st.just("counter"), st.sampled_from(sorted(TRACKS)), st.integers(-1000, 1000)),
        st.tuples(st.just("counter"), st.sampled_from(sorted(TRACKS)), st.floats(-1e6, 1e6)),
        st.tuples(st.just("with"), names, args),
        st.tuples(st.just("clear")),
    ),
    max_size=25,
)


def expected_value(value: Any) -> Any:
    """What a value reads back as."""
    if value is None:
        return "None"
    if isinstance(value, bool | float | str):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, dict):
        return {k: expected_value(v) for k, v in value.items()}
    return [expected_value(v) for v in value]


def run(operations: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Performs the calls; returns the events they should produce, in order."""
    expected: list[tuple[Any, ...]] = []
    depth = 0
    for op in operations:
        kind = op[0]
        if kind == "begin":
            pc.begin(CAT, op[1], **op[2])
            expected.append(("B", op[1], expected_value(op[2])))
            depth += 1
        elif kind == "end" and depth:
            pc.end(CAT)
            expected.append(("E", "", {}))
            depth -= 1
        elif kind == "instant":
            pc.instant(CAT, op[1], **op[2])
            expected.append(("I", op[1], expected_value(op[2])))
        elif kind == "counter":
            pc.counter(CAT, TRACKS[op[1]], op[2])
            expected.append(("C", f"property {op[1]}", op[2]))
        elif kind == "with":
            with pc.trace_event(CAT, op[1], **op[2]):
                expected.append(("B", op[1], expected_value(op[2])))
            expected.append(("E", "", {}))
        elif kind == "clear":
            for writer in thread_state().writers.values():
                if writer is not None:
                    writer.clear_incremental_state()
    while depth:
        pc.end(CAT)
        expected.append(("E", "", {}))
        depth -= 1
    return expected


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(ops)
def test_random_call_sequences_decode_to_the_same_events(
    operations: list[tuple[Any, ...]],
) -> None:
    expected: list[tuple[Any, ...]] = []

    def body() -> None:
        expected.extend(run(operations))

    trace = record_in_process(body)
    got: list[tuple[Any, ...]] = []
    for event in trace.events:
        if event.kind == "C":
            got.append(("C", trace.track_name(event.track), event.counter))
        else:
            got.append((event.kind, event.name, event.args))
    assert got == expected
    stamps = [e.ts for e in trace.events]
    assert stamps == sorted(stamps)
