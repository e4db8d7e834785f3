"""Custom data sources on the in-process backend."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import perfetto_client as pc
from perfetto_client import Backend, Tracing
from trace_model import TraceModel


class Recorded(pc.DataSource):
    name = "test.recorded"
    calls: list[str] = []  # noqa: RUF012 - the hooks called, in order, across instances
    stop_later: list[Callable[[], None]] = []  # noqa: RUF012 - deferred stops to finish
    defer_stop = False

    def on_setup(self, config: Any) -> None:
        self.calls.append(f"setup:{config.name}")

    def on_start(self, config: Any) -> None:
        self.calls.append("start")

    def on_stop(self, args: pc.StopArgs) -> None:
        self.calls.append("stop")
        if self.defer_stop:
            self.stop_later.append(args.handle_stop_asynchronously())

    def on_flush(self, args: pc.FlushArgs) -> None:
        self.calls.append("flush")

    def will_clear_incremental_state(self) -> None:
        self.calls.append("clear")


Recorded.register()


def _payloads(data: bytes) -> list[str]:
    trace = TraceModel(data).trace
    return [p.for_testing.str for p in trace.packet if p.HasField("for_testing")]


def _write(text: str) -> None:
    def fill(ctx: pc.TraceContext) -> None:
        ctx.new_trace_packet().begin_for_testing().set_str(text)

    Recorded.trace(fill)


def _session(*names: str) -> pc.TracingSession:
    Tracing.initialize(Backend.IN_PROCESS)
    session = Tracing.new_trace()
    session.setup({"data_sources": [{"config": {"name": n}} for n in names]})
    return session


def test_packets_reach_the_session_and_hooks_run_in_order() -> None:
    Recorded.calls.clear()
    _write("before")  # no session: nothing happens
    assert not Recorded.is_enabled()
    session = _session("test.recorded")
    session.start()
    assert Recorded.is_enabled()
    _write("one")
    other = threading.Thread(target=_write, args=("two",))
    other.start()
    other.join()
    session.stop()
    assert not Recorded.is_enabled()
    _write("after")
    assert sorted(_payloads(session.read_trace())) == ["one", "two"]
    assert Recorded.calls[:2] == ["setup:test.recorded", "start"]
    assert "stop" in Recorded.calls
    session.close()


def test_two_sessions_each_get_their_own_instance() -> None:
    first = _session("test.recorded")
    second = _session("test.recorded")
    first.start()
    _write("first only")
    second.start()
    _write("both")
    first.stop()
    _write("second only")
    second.stop()
    assert sorted(_payloads(first.read_trace())) == ["both", "first only"]
    assert sorted(_payloads(second.read_trace())) == ["both", "second only"]
    first.close()
    second.close()


def test_asynchronous_stop_waits_for_the_data_source() -> None:
    Recorded.defer_stop = True
    Recorded.stop_later.clear()
    session = _session("test.recorded")
    session.start()
    done = threading.Event()

    def stop() -> None:
        session.stop()
        done.set()

    threading.Thread(target=stop).start()
    try:
        assert not done.wait(0.3)  # the session waits for the data source
        _write("written while stopping")
        for finish in Recorded.stop_later:
            finish()
        assert done.wait(10)
    finally:
        Recorded.defer_stop = False
    assert _payloads(session.read_trace()) == ["written while stopping"]
    session.close()


def test_incremental_state_is_per_thread_and_cleared_on_request() -> None:
    seen: list[bool] = []

    def fill(ctx: pc.TraceContext) -> None:
        seen.append(ctx.incremental_state_was_cleared)
        ctx.incremental_state["n"] = ctx.incremental_state.get("n", 0) + 1
        ctx.new_trace_packet().begin_for_testing().set_str(str(ctx.incremental_state["n"]))

    Recorded.calls.clear()
    Tracing.initialize(Backend.IN_PROCESS)
    session = Tracing.new_trace()
    session.setup(
        {
            "data_sources": [{"config": {"name": "test.recorded"}}],
            "incremental_state_config": {"clear_period_ms": 150},
        }
    )
    session.start()
    Recorded.trace(fill)
    Recorded.trace(fill)
    import time

    deadline = time.monotonic() + 10
    while "clear" not in Recorded.calls and time.monotonic() < deadline:
        time.sleep(0.01)
    Recorded.trace(fill)
    session.stop()
    assert seen == [True, False, True]
    assert _payloads(session.read_trace()) == ["1", "2", "1"]
    session.close()
