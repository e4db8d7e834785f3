"""Categories, configs, asyncio, fork and triggers on the in-process backend."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import perfetto_client as pc
import pytest
from in_process_recording import Recorder, record_in_process
from perfetto_client import Backend, Tracing
from perfetto_client._categories import category_enabled_by
from perfetto_protos.config.track_event.track_event_config_pb2 import TrackEventConfig

CAT = pc.Category("test.lifecycle")


def _config(**fields: list[str]) -> TrackEventConfig:
    config = TrackEventConfig()
    for name, values in fields.items():
        getattr(config, name).extend(values)
    return config


@pytest.mark.parametrize(
    ("fields", "name", "tags", "expected"),
    [
        ({}, "cat", (), True),  # nothing matches: enabled
        ({}, "cat", ("slow",), False),  # slow and debug are off by default
        ({}, "cat", ("debug",), False),
        ({"enabled_tags": ["other"]}, "cat", ("slow",), True),  # defaults only without tags
        ({"disabled_categories": ["*"]}, "cat", (), False),
        ({"disabled_categories": ["*"], "enabled_categories": ["cat"]}, "cat", (), True),
        ({"enabled_categories": ["*"], "disabled_categories": ["cat"]}, "cat", (), False),
        ({"enabled_categories": ["ca*"], "disabled_categories": ["cat"]}, "cat", (), False),
        ({"enabled_categories": ["cat"], "disabled_categories": ["ca*"]}, "cat", (), True),
        ({"disabled_categories": ["ca*"], "enabled_categories": ["*"]}, "cat", (), False),
        # An exact tag match (first pass) wins over the "*" wildcard (last pass).
        ({"disabled_categories": ["*"], "enabled_tags": ["fast"]}, "cat", ("fast",), True),
        ({"disabled_tags": ["t*"], "enabled_categories": ["*"]}, "cat", ("tag",), False),
        ({"enabled_categories": ["cat"], "disabled_tags": ["slow"]}, "cat", ("slow",), True),
        ({"enabled_tags": ["slow"]}, "cat", ("slow",), True),
        ({"disabled_categories": ["*"], "enabled_categories": ["*"]}, "cat", (), True),
    ],
)
def test_category_matching_follows_upstreams_order(
    fields: dict[str, list[str]], name: str, tags: tuple[str, ...], expected: bool
) -> None:
    assert category_enabled_by(_config(**fields), name, tags) is expected


def test_dynamic_categories_and_is_enabled(record: Recorder) -> None:
    states: list[bool] = []

    def body() -> None:
        states.append(pc.is_enabled("dynamic.yes"))
        states.append(pc.is_enabled("dynamic.no"))
        pc.instant("dynamic.yes", "shown")
        pc.instant("dynamic.no", "hidden")

    config = {
        "data_sources": [
            {
                "config": {
                    "name": "track_event",
                    "track_event_config": {
                        "enabled_categories": ["dynamic.yes"],
                        "disabled_categories": ["*"],
                    },
                }
            }
        ]
    }
    trace = record(body, config)
    assert states == [True, False]
    (event,) = trace.events
    assert (event.name, event.categories) == ("shown", ["dynamic.yes"])


def test_categories_are_advertised_in_the_track_event_descriptor() -> None:
    pc.Category("test.advertised", description="shows up", tags=("slow",))
    Tracing.initialize(Backend.IN_PROCESS)
    from perfetto_client import _tracing

    backend = _tracing.in_process_backend()
    results: list[Any] = []
    consumer = backend.call(lambda: backend.service.connect_consumer(_NullConsumer(), os.getuid()))
    import threading

    done = threading.Event()

    def answer(ok: bool, state: Any) -> None:
        results.append(state)
        done.set()

    backend.post(lambda: consumer.query_service_state(False, answer))
    assert done.wait(10)
    descriptors = [
        ds.ds_descriptor for ds in results[0].data_sources if ds.ds_descriptor.name == "track_event"
    ]
    categories = {c.name: c for c in descriptors[-1].track_event_descriptor.available_categories}
    assert categories["test.advertised"].description == "shows up"
    assert list(categories["test.advertised"].tags) == ["slow"]


class _NullConsumer:
    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None


def test_async_slices_survive_awaits_on_their_task_tracks(record: Recorder) -> None:
    async def job(name: str, delay: float) -> None:
        with pc.trace_event(CAT, name):
            await asyncio.sleep(delay)
            with pc.trace_event(CAT, f"{name} inner"):
                await asyncio.sleep(delay)

    @pc.trace(CAT, "decorated coroutine")
    async def decorated() -> None:
        await asyncio.sleep(0.001)

    async def main() -> None:
        await asyncio.gather(job("a", 0.002), job("b", 0.001), decorated())

    trace = record(lambda: asyncio.run(main()))
    slices = {s.name: s for s in trace.slices()}
    assert slices["a"].track != slices["b"].track
    assert slices["a inner"].track == slices["a"].track
    assert slices["a inner"].depth == 1
    assert slices["b inner"].depth == 1
    for name in ("a", "b"):
        outer, inner = slices[name], slices[f"{name} inner"]
        assert outer.end is not None
        assert inner.end is not None
        assert outer.begin <= inner.begin <= inner.end <= outer.end
    assert trace.track_name(slices["a"].track).startswith("task ")
    assert slices["decorated coroutine"].end is not None


def test_flows_link_awaited_tasks_to_the_slice_that_awaited_them(record: Recorder) -> None:
    async def fetch(label: str, delay: float) -> None:
        with pc.trace_event(CAT, label):
            await asyncio.sleep(delay)

    @pc.trace(CAT, "gather both")
    async def main() -> None:
        await asyncio.gather(fetch("a", 0.002), fetch("b", 0.001))
        with pc.trace_event(CAT, "await one"):
            await asyncio.create_task(fetch("c", 0.001))
        fetch_inline = fetch("same task", 0.001)
        await fetch_inline  # no other task: no flow
        pc.instant(CAT, "after")

    trace = record(lambda: asyncio.run(main()))
    links = sorted((a.name, b.name) for a, b in trace.flow_links())
    assert links == [("a", "gather both"), ("b", "gather both"), ("c", "await one")]
    for source, target in trace.flow_links():
        assert source.track != target.track
        assert trace.track_name(source.track).startswith("task ")
        assert source.end is not None
        assert target.end is not None
        assert source.end <= target.end
    assert not {"same task", "after"} & {s.name for s in trace.slices() if s.flows}


def test_a_forked_child_starts_clean_and_can_trace_on_its_own(tmp_path: Any) -> None:
    child_trace = tmp_path / "child.pftrace"

    def body() -> None:
        pc.instant(CAT, "parent before fork")
        pid = os.fork()
        if pid == 0:
            status = 0
            try:
                if pc.is_enabled(CAT):
                    status = 2
                pc.instant(CAT, "child, no session")  # must go nowhere
                trace = record_in_process(lambda: pc.instant(CAT, "child session"))
                child_trace.write_bytes(
                    b"ok" if [e.name for e in trace.events] == ["child session"] else b"bad"
                )
            except BaseException:
                status = 3
            os._exit(status)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        pc.instant(CAT, "parent after fork")

    trace = record(body)
    assert [e.name for e in trace.events] == ["parent before fork", "parent after fork"]
    assert child_trace.read_bytes() == b"ok"


def record(body: Any, config: Any = None) -> Any:
    return record_in_process(body, config)


def test_triggers_stop_a_session_waiting_for_them() -> None:
    Tracing.initialize(Backend.IN_PROCESS)
    session = Tracing.new_trace()
    stopped = []
    session.on_stop = lambda: stopped.append(True)
    session.setup(
        {
            "trigger_config": {
                "trigger_mode": "STOP_TRACING",
                "trigger_timeout_ms": 30000,
                "triggers": [{"name": "test.trigger", "stop_delay_ms": 0}],
            }
        }
    )
    session.start()
    pc.instant(CAT, "before trigger")
    Tracing.activate_triggers(["test.trigger"])
    import time

    deadline = time.monotonic() + 10
    while not stopped and time.monotonic() < deadline:
        time.sleep(0.01)
    assert stopped
    from trace_model import TraceModel

    trace = TraceModel(session.read_trace())
    assert [e.name for e in trace.events] == ["before trigger"]
    assert any(p.HasField("trigger") for p in trace.trace.packet)
    session.close()


def test_console_interceptor_prints_events_instead_of_recording_them(
    capfd: pytest.CaptureFixture[str],
) -> None:
    config = {
        "data_sources": [
            {"config": {"name": "track_event", "interceptor_config": {"name": "console"}}}
        ]
    }

    def body() -> None:
        with pc.trace_event(CAT, "outer", n=1):
            pc.instant(CAT, "inside", ok=True)
        pc.counter(CAT, "console counter", 7)

    trace = record(body, config)
    err = capfd.readouterr().err.splitlines()
    assert trace.events == []  # routed to the interceptor, not the buffer
    assert any("> test.lifecycle:outer n=1" in line for line in err)
    assert any("  * test.lifecycle:inside ok=True" in line for line in err)
    assert any("< outer (" in line for line in err)
    assert any("console counter = 7" in line for line in err)


def test_two_sessions_record_the_categories_each_enables() -> None:
    from trace_model import TraceModel

    first_only = pc.Category("test.first")
    second_only = pc.Category("test.second")

    def config(name: str) -> dict[str, Any]:
        te = {"enabled_categories": [name, "test.both"], "disabled_categories": ["*"]}
        return {"data_sources": [{"config": {"name": "track_event", "track_event_config": te}}]}

    Tracing.initialize(Backend.IN_PROCESS)
    first, second = Tracing.new_trace(), Tracing.new_trace()
    first.setup(config("test.first"))
    second.setup(config("test.second"))
    first.start()
    second.start()
    pc.instant(first_only, "one")
    pc.instant(second_only, "two")
    pc.instant("test.both", "both")
    first.stop()
    second.stop()
    got_first = [e.name for e in TraceModel(first.read_trace()).events]
    got_second = [e.name for e in TraceModel(second.read_trace()).events]
    first.close()
    second.close()
    assert got_first == ["one", "both"]
    assert got_second == ["two", "both"]


def test_read_trace_takes_as_long_as_data_keeps_arriving() -> None:
    import time

    from trace_model import TraceModel

    Tracing.initialize(Backend.IN_PROCESS)
    session = Tracing.new_trace()
    session.setup({"buffers": [{"size_kb": 32768}]})
    session.start()
    count = 20_000
    for i in range(count):
        pc.instant(CAT, "bulk", i=i)
    session.stop()
    deliver = session.on_trace_data
    replies = []

    def slow(packets: Any, has_more: bool) -> None:  # a slow reader: each reply takes 0.3 s
        replies.append(has_more)
        time.sleep(0.3)
        deliver(packets, has_more)

    session.on_trace_data = slow  # type: ignore[method-assign]
    start = time.monotonic()
    data = session.read_trace(timeout=2.0)  # between two replies: 0.3 s, or a loaded pause
    assert time.monotonic() - start > 2.0 * 2  # twice the timeout
    assert len(replies) > 13
    assert [e.args["i"] for e in TraceModel(data).events if e.name == "bulk"] == list(range(count))
    session.close()
