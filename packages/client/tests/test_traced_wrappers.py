"""The two things `@trace` makes of a function, the compiled build's `TracedFunction` and the
pure build's wrapper (`_traced_wrapper`), driven with the same calls: same results, and the
same track event packets, byte for byte (both run in either build: `TracedFunction` is a
plain class where its module is not compiled).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import perfetto_client as pc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from in_process_recording import record_in_process
from perfetto_client._traced_function import TracedFunction
from perfetto_client._traced_wrapper import traced_wrapper
from perfetto_client._track_event import BOOTTIME_CLOCK, set_trace_clock

CAT = pc.Category("test.traced_wrappers")

Call = tuple[tuple[Any, ...], dict[str, Any]]


@st.composite
def signatures_and_calls(
    draw: st.DrawFn,
) -> tuple[str, list[Call]]:
    """A function's parameter list and valid calls of it (positional args, keyword args)."""
    posonly = [f"p{i}" for i in range(draw(st.integers(0, 2)))]
    normal = [f"a{i}" for i in range(draw(st.integers(0, 3)))]
    positional = posonly + normal
    defaults = draw(st.integers(0, len(positional)))
    kwonly = [(f"k{i}", draw(st.booleans())) for i in range(draw(st.integers(0, 2)))]
    varargs = draw(st.booleans())
    varkw = draw(st.booleans())
    first_default = len(positional) - defaults
    params = []
    for i, name in enumerate(positional):
        params.append(f"{name}={i * 10}" if i >= first_default else name)
        if posonly and i == len(posonly) - 1:
            params.append("/")
    if varargs:
        params.append("*rest")
    elif kwonly:
        params.append("*")
    params.extend(f"{name}=-1" if has_default else name for name, has_default in kwonly)
    if varkw:
        params.append("**more")
    values = st.integers(-5, 5) | st.text(max_size=3) | st.none()
    calls = []
    for _ in range(draw(st.integers(1, 4))):
        count = draw(st.integers(first_default, len(positional)))
        args = [draw(values) for _ in range(count)]
        if varargs and count == len(positional):
            args += draw(st.lists(values, max_size=2))
        kwargs = {
            name: draw(values) for name in normal[count - len(posonly) :] if draw(st.booleans())
        }
        if count < len(posonly):
            kwargs = {name: value for name, value in kwargs.items() if name not in posonly}
        for name, has_default in kwonly:
            if not has_default or draw(st.booleans()):
                kwargs[name] = draw(values)
        if varkw and draw(st.booleans()):
            kwargs["extra"] = draw(values)
        calls.append((tuple(args), kwargs))
    return ", ".join(params), calls


def _function(params: str) -> Callable[..., Any]:
    """A function with parameters `params` returning what it was called with."""
    namespace: dict[str, Any] = {}
    exec(f"def f({params}):\n    return dict(locals())\n", namespace)
    fn: Callable[..., Any] = namespace["f"]
    return fn


def _run(wrapper: Callable[..., Any], calls: list[Call]) -> tuple[list[Any], list[bytes]]:
    """The results of `calls` of `wrapper` and the track event packets they recorded, on a
    clock that counts from the same start each time."""
    results: list[Any] = []

    def body() -> None:
        set_trace_clock(itertools.count(1_000_000, 1_000).__next__)
        for args, kwargs in calls:
            results.append(wrapper(*args, **kwargs))

    try:
        model = record_in_process(body)
    finally:
        set_trace_clock(BOOTTIME_CLOCK)
    packets = []
    for packet in model.trace.packet:
        if packet.HasField("track_event"):
            packet.ClearField("trusted_packet_sequence_id")
            packets.append(packet.SerializeToString())
    return results, packets


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(signatures_and_calls())
def test_both_wrappers_write_the_same_slices(
    case: tuple[str, list[Call]],
) -> None:
    params, calls = case
    fn = _function(params)
    key = CAT.event_key("f")
    compiled_results, compiled_packets = _run(TracedFunction(fn, CAT, key), calls)
    pure_results, pure_packets = _run(traced_wrapper(fn, CAT, key), calls)
    assert compiled_results == pure_results == [fn(*a, **k) for a, k in calls]
    assert len(compiled_packets) == 2 * len(calls)  # a slice per call
    assert compiled_packets == pure_packets


def test_both_wrappers_carry_the_function_and_bind_as_methods() -> None:
    def f(self: object, x: int) -> tuple[object, int]:
        """doc"""
        return self, x

    key = CAT.event_key("f")
    wrappers: tuple[Any, ...] = (TracedFunction(f, CAT, key), traced_wrapper(f, CAT, key))
    for wrapped in wrappers:
        assert (wrapped.__name__, wrapped.__doc__, wrapped.__wrapped__) == ("f", "doc", f)
        holder = type("Holder", (), {"m": wrapped})()
        assert holder.m(3) == (holder, 3)
