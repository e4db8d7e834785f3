"""Track events on the in-process backend, checked with upstream's schema."""

from __future__ import annotations

import pickle
import sys
import threading
import weakref
from typing import Any

import perfetto_client as pc
import pytest
from in_process_recording import Recorder
from perfetto_client import _track_event
from perfetto_client._track_event import thread_state
from perfetto_client._track_event_writer import TYPE_COUNTER, counter_value_field
from perfetto_protos.trace.track_event.track_event_pb2 import TrackEvent

CAT = pc.Category("test.events", description="events of the tests")


@pc.trace(CAT)
def fib(n: int) -> int:
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def test_decorated_calls_nest_on_the_thread_track(record: Recorder) -> None:
    trace = record(lambda: fib(4))
    slices = trace.slices()
    assert len(slices) == 9  # calls of fib(4)
    assert {s.name for s in slices} == {"fib"}
    assert all(s.end is not None and s.end >= s.begin for s in slices)
    assert max(s.depth for s in slices) == 3
    assert slices[0].depth == 0
    assert slices[0].categories == ["test.events"]
    track = trace.tracks[slices[0].track]
    assert track.thread.tid == threading.get_native_id()
    assert track.thread.thread_name == threading.current_thread().name
    assert trace.tracks[track.parent_uuid].process.pid == track.thread.pid


def test_event_names_are_interned_once_per_sequence(record: Recorder) -> None:
    trace = record(lambda: [fib(3) for _ in range(5)])
    entries = [e.name for p in trace.trace.packet for e in p.interned_data.event_names]
    assert entries.count("fib") == 1
    assert len(trace.slices()) == 25


class Point:
    def __init__(self, x: int, y: int) -> None:
        self.x, self.y = x, y

    def __perfetto_trace__(self) -> object:
        return {"x": self.x, "y": self.y}


def test_arguments_keep_their_types(record: Recorder) -> None:
    def body() -> None:
        with pc.trace_event(
            CAT,
            "args",
            flag=True,
            small=-5,
            big=(1 << 64) - 1,
            ratio=0.25,
            text="héllo",
            raw=b"\x00\x01",
            nothing=None,
            nested={"a": [1, 2, {"b": "c"}], "t": (True, 1.5)},
            point=Point(3, 4),
        ):
            pass

    trace = record(body)
    (s,) = trace.slices()
    assert s.args == {
        "flag": True,
        "small": -5,
        "big": (1 << 64) - 1,
        "ratio": 0.25,
        "text": "héllo",
        "raw": "b'\\x00\\x01'",
        "nothing": "None",
        "nested": {"a": [1, 2, {"b": "c"}], "t": [True, 1.5]},
        "point": {"x": 3, "y": 4},
    }


def test_args_keep_their_names_across_clears_of_the_incremental_state(record: Recorder) -> None:
    def body() -> None:
        for round_ in range(3):
            # first after a clear: the event's name is emitted again, its args' names are not
            with pc.trace_event(CAT, "step", first=round_):
                pass
            for step in range(2):  # the second call of a round takes the chunk's fast path
                with pc.trace_event(CAT, "step", rnd=round_, step=step):
                    pass
                with pc.trace_event(CAT, "step", step=step, rnd=round_):  # the names reordered
                    pass
            for writer in thread_state().writers.values():
                assert writer is not None
                writer.clear_incremental_state()

    trace = record(body)
    clears = [p for p in trace.trace.packet if p.sequence_flags & 1]
    assert len(clears) >= 3
    expected = []
    for r in range(3):
        expected.append({"first": r})
        expected += [{"rnd": r, "step": s} for s in range(2) for _ in range(2)]
    assert [s.args for s in trace.slices()] == expected


def test_typed_proto_callback_writes_into_the_event(record: Recorder) -> None:
    def fill(event: TrackEvent) -> None:
        event.log_message.body_iid = 0
        event.correlation_id = 77

    trace = record(lambda: pc.instant(CAT, "with-proto", proto=fill))
    packets = [p for p in trace.trace.packet if p.HasField("track_event")]
    assert packets[0].track_event.correlation_id == 77


def test_begin_end_instant_and_explicit_timestamps(record: Recorder) -> None:
    def body() -> None:
        pc.begin(CAT, "outer", step=1)
        pc.instant(CAT, "mark")
        pc.begin(CAT, "inner")
        pc.end(CAT)
        pc.end(CAT)

    trace = record(body)
    slices = trace.slices()
    assert [(s.name, s.depth) for s in slices] == [("outer", 0), ("mark", 1), ("inner", 1)]
    assert slices[0].args == {"step": 1}
    assert slices[0].end is not None
    assert slices[2].end is not None
    assert slices[0].end >= slices[2].end


def test_the_end_of_a_slice_carries_its_args_and_flows(record: Recorder) -> None:
    flow = pc.Flow(5)

    def body() -> None:
        pc.begin(CAT, "work", flow=flow)
        pc.end(CAT, outcome="passed")
        pc.begin(CAT, "next")
        pc.end(CAT, terminating_flow=flow)

    trace = record(body)
    ends = [e for e in trace.events if e.kind == "E"]
    assert ends[0].args == {"outcome": "passed"}  # trace_processor adds them to the slice's
    assert ends[1].terminating_flows == [flow.id]
    [(first, second)] = trace.flow_links()
    assert (first.name, second.name) == ("work", "next")


def test_instants_and_counters_without_options_write_what_the_general_path_writes(
    record: Recorder,
) -> None:
    track = pc.CounterTrack("same")

    def body() -> None:
        pc.instant(CAT, "mark")  # no options: the writer's own instant
        pc.instant(CAT, "mark", flow=())  # an empty flow list: the general path
        pc.instant(CAT, "other")
        pc.instant(CAT, "other", terminating_flow=())
        for value in (5, 1 << 40, -2, 0.5):
            pc.counter(CAT, track, value)  # the writer's own counter
            for writer in thread_state().writers.values():  # the general event
                assert writer is not None
                fields = track.uuid_field + counter_value_field(value)
                writer.event(0, TYPE_COUNTER, writer.now(), fields, b"")

    trace = record(body)
    packets = [p for p in trace.trace.packet if p.HasField("track_event")]
    events = [p.track_event for p in packets]
    assert len(events) == 12
    for fast, general in zip(events[::2], events[1::2], strict=True):
        assert fast == general
    assert [s.name for s in trace.slices()] == ["mark", "mark", "other", "other"]
    assert trace.counters("same") == [5, 5, 1 << 40, 1 << 40, -2, -2, 0.5, 0.5]
    names = [e.name for p in packets for e in p.interned_data.event_names]
    assert names == ["mark", "other"]


def test_compiled_instant_runs_no_python_code_of_the_client(record: Recorder) -> None:
    if not (_track_event.__file__ or "").endswith(".so"):
        pytest.skip("the pure build runs the client's Python code")
    entered: list[str] = []

    def profile(frame: Any, event: str, arg: object) -> None:
        if event == "call" and "perfetto_client" in frame.f_code.co_filename:
            entered.append(frame.f_code.co_qualname)

    def body() -> None:
        pc.instant(CAT, "mark")  # interns the name
        sys.setprofile(profile)
        try:
            pc.instant(CAT, "mark")
        finally:
            sys.setprofile(None)

    trace = record(body)
    assert [s.name for s in trace.slices()] == ["mark", "mark"]
    assert entered == []


def test_compiled_traced_call_runs_no_python_code_of_the_client(record: Recorder) -> None:
    if not (_track_event.__file__ or "").endswith(".so"):
        pytest.skip("the pure build runs the client's Python code")
    entered: list[str] = []

    def profile(frame: Any, event: str, arg: object) -> None:
        if event == "call" and "perfetto_client" in frame.f_code.co_filename:
            entered.append(frame.f_code.co_qualname)

    def body() -> None:
        fib(1)  # interns the name
        sys.setprofile(profile)
        try:
            fib(2)
        finally:
            sys.setprofile(None)

    trace = record(body)
    assert [s.name for s in trace.slices()] == ["fib"] * 4
    assert entered == []


def test_compiled_counter_runs_no_python_code_of_the_client(record: Recorder) -> None:
    if not (_track_event.__file__ or "").endswith(".so"):
        pytest.skip("the pure build runs the client's Python code")
    track = pc.CounterTrack("no python")
    entered: list[str] = []

    def profile(frame: Any, event: str, arg: object) -> None:
        if event == "call" and "perfetto_client" in frame.f_code.co_filename:
            entered.append(frame.f_code.co_qualname)

    def body() -> None:
        pc.counter(CAT, track, 1)  # describes the track
        sys.setprofile(profile)
        try:
            pc.counter(CAT, track, 2)
        finally:
            sys.setprofile(None)

    trace = record(body)
    assert trace.counters("no python") == [1, 2]
    assert entered == []


def test_compiled_events_on_an_explicit_track_run_no_python_code_of_the_client(
    record: Recorder,
) -> None:
    if not (_track_event.__file__ or "").endswith(".so"):
        pytest.skip("the pure build runs the client's Python code")
    track = pc.NamedTrack("explicit")
    entered: list[str] = []

    def profile(frame: Any, event: str, arg: object) -> None:
        if event == "call" and "perfetto_client" in frame.f_code.co_filename:
            entered.append(frame.f_code.co_qualname)

    def body() -> None:
        pc.instant(CAT, "mark", track=track)  # interns the names, describes the track
        with pc.trace_event(CAT, "span", track=track, n=1):
            pass
        sys.setprofile(profile)
        try:
            pc.instant(CAT, "mark", track=track)
            with pc.trace_event(CAT, "span", track=track, n=2):
                pass
        finally:
            sys.setprofile(None)

    trace = record(body)
    assert sorted((s.name, s.track) for s in trace.slices()) == [
        ("mark", track.uuid),
        ("mark", track.uuid),
        ("span", track.uuid),
        ("span", track.uuid),
    ]
    assert entered == []


def test_explicit_timestamps_are_kept(record: Recorder) -> None:
    import time

    base = time.clock_gettime_ns(time.CLOCK_BOOTTIME)

    def body() -> None:
        pc.begin(CAT, "a", timestamp=base + 1000)
        pc.end(CAT, timestamp=base + 5000)
        pc.instant(CAT, "earlier", timestamp=base + 10)  # before the last: absolute

    trace = record(body)
    slices = {s.name: s for s in trace.slices()}
    assert slices["a"].begin == base + 1000
    assert slices["a"].end == base + 5000
    assert slices["earlier"].begin == base + 10


def test_a_counter_on_something_else_than_a_track_is_a_type_error_naming_it(
    record: Recorder,
) -> None:
    failures: list[str] = []

    def body() -> None:
        for track in (7, None, pc.ThreadTrack.current().uuid_field):
            try:
                pc.counter(CAT, track, 1)
            except TypeError as error:
                failures.append(str(error))
        pc.counter(CAT, "after", 2)

    trace = record(body)
    assert failures == [
        f"counter's track is a CounterTrack or a name, not {kind}"
        for kind in ("int", "NoneType", "bytes")
    ]
    assert trace.counters("after") == [2]


def test_counters_with_units_and_types(record: Recorder) -> None:
    memory = pc.CounterTrack("memory", unit=pc.CounterUnit.SIZE_BYTES)
    rate = pc.CounterTrack("rate", unit="req/s", unit_multiplier=1000)

    def body() -> None:
        pc.counter(CAT, memory, 1024)
        pc.counter(CAT, memory, 2048)
        pc.counter(CAT, rate, 1.5)
        pc.counter(CAT, "plain", -3)

    trace = record(body)
    assert trace.counters("memory") == [1024, 2048]
    assert trace.counters("rate") == [1.5]
    assert trace.counters("plain") == [-3]
    desc = trace.tracks[memory.uuid]
    assert desc.counter.unit == 3
    assert trace.tracks[rate.uuid].counter.unit_name == "req/s"
    assert trace.tracks[rate.uuid].counter.unit_multiplier == 1000
    assert trace.tracks[desc.parent_uuid].HasField("process")


def test_named_tracks_with_parents_and_flows(record: Recorder) -> None:
    parent = pc.NamedTrack("requests")
    child = pc.NamedTrack("request 1", parent=parent)
    glob = pc.Track.global_track(1234)
    flow = pc.Flow(7)

    def body() -> None:
        with pc.trace_event(CAT, "send", track=child, flow=flow):
            pass
        with pc.trace_event(CAT, "receive", terminating_flow=flow):
            pass
        pc.instant(CAT, "global", track=glob)

    trace = record(body)
    by_name = {s.name: s for s in trace.slices()}
    assert by_name["send"].track == child.uuid
    assert trace.tracks[child.uuid].parent_uuid == parent.uuid
    assert trace.tracks[parent.uuid].name == "requests"
    assert by_name["global"].track == 1234
    assert not trace.tracks[1234].HasField("parent_uuid")
    events = {e.name: e for e in trace.events if e.name}
    assert events["send"].flows == [flow.id]
    assert events["receive"].terminating_flows == [flow.id]
    assert pc.Flow.global_flow(5).id == 5
    assert pc.Flow(5).id != 5


def test_threads_get_their_own_sequences_and_names(record: Recorder) -> None:
    def work(depth: int) -> None:
        with pc.trace_event(CAT, "work", depth=depth):
            if depth:
                work(depth - 1)

    def body() -> None:
        threads = [threading.Thread(target=work, args=(3,), name=f"worker-{i}") for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    trace = record(body)
    slices = trace.slices()
    names = {trace.track_name(s.track) for s in slices}
    assert names == {f"worker-{i}" for i in range(4)}
    for name in names:
        mine = [s for s in slices if trace.track_name(s.track) == name]
        assert [s.depth for s in mine] == [0, 1, 2, 3]
        assert [s.args["depth"] for s in mine] == [3, 2, 1, 0]
    assert len({e.seq for e in trace.events}) == 4


def test_timestamps_are_monotonic_and_inside_the_session(record: Recorder) -> None:
    trace = record(lambda: fib(6))
    start = trace.service_snapshots[0][6]
    by_seq: dict[int, list[int]] = {}
    for e in trace.events:
        by_seq.setdefault(e.seq, []).append(e.ts)
    for stamps in by_seq.values():
        assert stamps == sorted(stamps)
        assert stamps[0] >= start


def test_disabled_categories_write_nothing(record: Recorder) -> None:
    slow = pc.Category("test.slow", tags=("slow",))
    other = pc.Category("test.other")

    def body() -> None:
        with pc.trace_event(slow, "hidden"):
            pc.instant(other, "hidden-too")
        pc.instant(CAT, "shown")

    config = {
        "data_sources": [
            {
                "config": {
                    "name": "track_event",
                    "track_event_config": {"disabled_categories": ["test.other"]},
                }
            }
        ]
    }
    trace = record(body, config)
    assert [s.name for s in trace.slices()] == ["shown"]
    assert not slow.enabled
    assert not pc.is_enabled("test.events")


def test_incremental_state_is_cleared_and_re_emitted(record: Recorder) -> None:
    import time

    def body() -> None:
        deadline = time.monotonic() + 2  # 20 periods: 2 clears even if the service is starved
        while time.monotonic() < deadline:
            fib(3)
            time.sleep(0.005)

    config = {"incremental_state_config": {"clear_period_ms": 100}}
    trace = record(body, config)
    clears = [p for p in trace.trace.packet if p.sequence_flags & 1]
    assert len(clears) >= 2
    assert {s.name for s in trace.slices()} == {"fib"}
    assert all(s.end is not None for s in trace.slices())


def test_decorated_functions_keep_their_signatures_and_behaviour(record: Recorder) -> None:
    import inspect

    def plain(
        a: int, /, b: int, c: int = 3, *rest: int, d: object, e: int = 5, **extra: int
    ) -> tuple[object, ...]:
        return (a, b, c, rest, d, e, extra)

    traced = pc.trace(CAT)(plain)
    assert inspect.signature(traced) == inspect.signature(plain)
    assert traced.__name__ == "plain"
    assert traced.__qualname__ == plain.__qualname__
    assert traced.__doc__ == plain.__doc__
    assert traced.__module__ == plain.__module__
    assert traced.__wrapped__ is plain  # type: ignore[attr-defined]
    assert weakref.ref(traced)() is traced
    assert pickle.loads(pickle.dumps(fib)) is fib
    calls: list[tuple[tuple[int, ...], dict[str, Any]]] = [
        ((1, 2), {"d": 4}),
        ((1, 2, 30, 40, 50), {"d": 4, "e": 6, "x": 7}),
        ((1,), {"b": 2, "c": 0, "d": None}),
    ]

    class Box:
        @pc.trace(CAT)
        def method(self, value: int = 2) -> int:
            return value * 2

        @classmethod
        @pc.trace(CAT)
        def build(cls, value: int) -> tuple[type, int]:
            return cls, value

        @staticmethod
        @pc.trace(CAT)
        def double(value: int) -> int:
            return value * 2

    def body() -> None:
        for args, kwargs in calls:
            assert traced(*args, **kwargs) == plain(*args, **kwargs)
        assert Box().method() == 4
        assert Box().method(value=5) == 10
        assert Box.method(Box(), 3) == 6
        assert Box.build(1) == (Box, 1)
        assert Box().double(4) == 8

    trace = record(body)
    names = [s.name for s in trace.slices()]
    assert (
        names.count("test_decorated_functions_keep_their_signatures_and_behaviour.<locals>.plain")
        == 3
    )
    assert (
        names.count(
            "test_decorated_functions_keep_their_signatures_and_behaviour.<locals>.Box.method"
        )
        == 3
    )
    assert (
        names.count(
            "test_decorated_functions_keep_their_signatures_and_behaviour.<locals>.Box.build"
        )
        == 1
    )
    assert (
        names.count(
            "test_decorated_functions_keep_their_signatures_and_behaviour.<locals>.Box.double"
        )
        == 1
    )


def test_a_renamed_thread_is_described_again_with_its_new_name(record: Recorder) -> None:
    started = threading.Event()
    renamed = threading.Event()

    def work() -> None:
        pc.instant(CAT, "before")
        threading.current_thread().name = "renamed by itself"
        pc.instant(CAT, "after renaming itself")
        started.set()
        renamed.wait(10)
        pc.instant(CAT, "after renamed by main")

    def body() -> None:
        thread = threading.Thread(target=work, name="original")
        thread.start()
        started.wait(10)
        thread.name = "renamed by main"
        renamed.set()
        thread.join()
        assert thread.native_id is not None
        worker_tid.append(thread.native_id)

    worker_tid: list[int] = []
    trace = record(body)
    events = iter(trace.events)
    name_at_event: dict[str, str] = {}
    current = ""
    for packet in trace.trace.packet:
        desc = packet.track_descriptor
        if packet.HasField("track_descriptor") and desc.thread.tid == worker_tid[0]:
            current = desc.thread.thread_name
        if packet.HasField("track_event"):
            name_at_event[next(events).name] = current
    assert name_at_event == {
        "before": "original",
        "after renaming itself": "renamed by itself",
        "after renamed by main": "renamed by main",
    }
    assert trace.thread_names()[worker_tid[0]] == "renamed by main"


def test_thread_time_sampling_adds_the_thread_cpu_time_to_thread_track_events(
    record: Recorder,
) -> None:
    import time

    @pc.trace(CAT, "busy")
    def busy() -> int:
        total = 0
        for i in range(300_000):
            total += i
        return total

    marks: list[int] = []

    def body() -> None:
        marks.append(time.thread_time_ns())
        busy()
        with pc.trace_event(CAT, "sleeping"):
            time.sleep(0.01)
        pc.instant(CAT, "on a named track", track=pc.NamedTrack("elsewhere"))
        pc.counter(CAT, "a counter", 1)
        marks.append(time.thread_time_ns())

    config = {
        "data_sources": [
            {
                "config": {
                    "name": "track_event",
                    "track_event_config": {"enable_thread_time_sampling": True},
                }
            }
        ]
    }
    trace = record(body, config)
    defaults = [p for p in trace.trace.packet if p.HasField("trace_packet_defaults")]
    assert len(defaults) == 1
    counter_uuids = list(
        defaults[0].trace_packet_defaults.track_event_defaults.extra_counter_track_uuids
    )
    assert len(counter_uuids) == 1
    counter_track = trace.tracks[counter_uuids[0]]
    assert counter_track.counter.type == 1  # COUNTER_THREAD_TIME_NS
    assert counter_track.counter.is_incremental
    thread_track = trace.tracks[counter_track.parent_uuid]
    assert thread_track.thread.tid == threading.get_native_id()

    thread_time = 0
    samples: list[tuple[str, str, int]] = []
    events = iter(trace.events)
    for packet in trace.trace.packet:
        if packet.HasField("track_event"):
            event = next(events)
            values = list(packet.track_event.extra_counter_values)
            if event.track == thread_track.uuid:
                assert len(values) == 1
                thread_time += values[0]  # an incremental counter: the values are deltas
                samples.append((event.kind, event.name, thread_time))
            else:
                assert values == []
    assert [(kind, name) for kind, name, _ in samples] == [
        ("B", "busy"),
        ("E", ""),
        ("B", "sleeping"),
        ("E", ""),
    ]
    times = [t for _, _, t in samples]
    assert marks[0] <= times[0] <= times[1] <= times[2] <= times[3] <= marks[1]
    assert times[1] - times[0] > times[3] - times[2]  # busy used more CPU than sleeping


def test_events_go_on_a_task_track_exactly_while_a_task_is_current(record: Recorder) -> None:
    """Without `track=`, instants and slices go on the current asyncio task's track: not in a
    loop's callback (no task current), nor on a thread while a task is current on another."""
    import asyncio

    inside = threading.Event()
    release = threading.Event()

    def other_thread() -> None:
        async def waiting() -> None:
            pc.instant(CAT, "other thread's task")
            inside.set()
            assert release.wait(30)  # blocks with the task current on this thread

        asyncio.run(waiting())

    async def main() -> None:
        pc.instant(CAT, "in a task")
        with pc.trace_event(CAT, "slice in a task"):
            pass
        loop = asyncio.get_running_loop()
        called = loop.create_future()

        def callback() -> None:
            pc.instant(CAT, "in a callback")
            with pc.trace_event(CAT, "slice in a callback"):
                pass
            called.set_result(None)

        loop.call_soon(callback)
        await called
        if sys.version_info >= (3, 12):
            loop.set_task_factory(asyncio.eager_task_factory)  # type: ignore[arg-type]

            async def eager() -> None:
                pc.instant(CAT, "in an eager task")

            await loop.create_task(eager())

    def body() -> None:
        pc.instant(CAT, "before asyncio runs")
        asyncio.run(main())
        thread = threading.Thread(target=other_thread, name="other")
        thread.start()
        assert inside.wait(30)
        pc.instant(CAT, "while another thread's task runs")
        with pc.trace_event(CAT, "slice while another thread's task runs"):
            pass
        release.set()
        thread.join()
        pc.instant(CAT, "after asyncio ran")

    trace = record(body)
    tracks = {s.name: trace.track_name(s.track) for s in trace.slices()}
    main_thread = threading.current_thread().name
    on_tasks = ["in a task", "slice in a task", "other thread's task"]
    if sys.version_info >= (3, 12):
        on_tasks.append("in an eager task")
    for name in on_tasks:
        assert tracks[name].startswith("task "), (name, tracks[name])
    assert tracks["in a task"] == tracks["slice in a task"]
    assert tracks["other thread's task"] != tracks["in a task"]
    on_threads = [
        "before asyncio runs",
        "in a callback",
        "slice in a callback",
        "while another thread's task runs",
        "slice while another thread's task runs",
        "after asyncio ran",
    ]
    assert {tracks[name] for name in on_threads} == {main_thread}


ENTRIES = {
    "instant": (
        "(category: 'str | Category', name: 'str', /, *, track: 'Track | None' = None,"
        " timestamp: 'int | None' = None, flow: 'FlowArg' = None,"
        " terminating_flow: 'FlowArg' = None, correlation_id: 'int | str | None' = None,"
        " proto: 'Callable[[TrackEvent], None] | None' = None, **args: 'object') -> 'None'",
        "Records an instant event `name` on the thread's track (or `track`).",
        [
            lambda f: f(),
            lambda f: f(CAT),
            lambda f: f(CAT, "n", "extra"),
            lambda f: f(CAT, ""),
            lambda f: f(CAT, "", track=None),
            lambda f: f(CAT, None),
            lambda f: f(42, "n"),
            lambda f: f(category=CAT, name="n"),
        ],
    ),
    "counter": (
        "(category: 'str | Category', track: 'CounterTrack | str', value: 'float', *,"
        " timestamp: 'int | None' = None) -> 'None'",
        "Adds a point to a counter track (a CounterTrack, or a name under the process track).\n"
        "\n    An int value is recorded as an int64 counter value, a float as a double.\n    ",
        [
            lambda f: f(),
            lambda f: f(CAT),
            lambda f: f(CAT, "c"),
            lambda f: f(CAT, "c", 1, 2),
            lambda f: f(CAT, "c", 1, stamp=5),
            lambda f: f(CAT, 5, 1),
            lambda f: f(CAT, None, 1),
            lambda f: f(CAT, "c", "one"),
            lambda f: f(CAT, "c", 1 << 70, timestamp="late"),
            lambda f: f(42, "c", 1),
        ],
    ),
    "trace_event": (
        "(category: 'str | Category', name: 'str', /, *, track: 'Track | None' = None,"
        " flow: 'FlowArg' = None, terminating_flow: 'FlowArg' = None,"
        " correlation_id: 'int | str | None' = None,"
        " proto: 'Callable[[TrackEvent], None] | None' = None, **args: 'object')"
        " -> 'Slice | NoSlice'",
        "A context manager recording a slice `name` around its body; keyword arguments are"
        " args.\n\n    Inside an asyncio task the slice goes on the task's track, so it"
        " survives awaits.\n    ",
        [
            lambda f: f(),
            lambda f: f(CAT),
            lambda f: f(CAT, "n", "extra"),
            lambda f: f(CAT, "n", "extra", a=1),
            lambda f: f(42, "n"),
            lambda f: f(42, "n", a=1),
            lambda f: f(category=CAT, name="n"),
            lambda f: f(CAT, name="n", a=1),
            lambda f: f(CAT, "n", track="not a track"),
            lambda f: f(CAT, "n", a=1, **{"".join(("fl", "ow")): "not a flow"}),  # not interned
        ],
    ),
}


@pytest.mark.parametrize("name", sorted(ENTRIES))
def test_entries_keep_the_functions_signature_doc_pickling_and_errors(
    name: str, record: Recorder
) -> None:
    """instant, counter and trace_event: compiled, an entry calling the function (a
    VectorcallFunction)."""
    import inspect
    import pydoc

    pure_signature, doc, bad_calls = ENTRIES[name]
    entry = getattr(pc, name)
    function = getattr(entry, "__wrapped__", entry)  # compiled: the function it calls

    def signature(f: Any) -> str | None:
        try:
            return str(inspect.signature(f))
        except ValueError:  # compiled: a built-in function's, which Cython does not give
            return None

    assert signature(entry) == signature(function)
    if function is entry and not (_track_event.__file__ or "").endswith(".so"):
        assert signature(entry) == pure_signature
    assert entry.__name__ == entry.__qualname__ == name
    assert entry.__module__ == "perfetto_client._events"
    assert entry.__doc__ == doc
    assert pickle.loads(pickle.dumps(entry)) is entry
    assert repr(entry) == repr(function)

    class Owner:
        method = entry

    if inspect.isfunction(function):  # pure: binds as a method
        assert getattr(Owner().method, "__func__", None) is entry
    else:  # compiled: as a built-in function, does not bind
        assert Owner().method is entry
    assert doc.splitlines()[0] in pydoc.render_doc(entry)
    assert pydoc.render_doc(entry).splitlines()[2:] == pydoc.render_doc(function).splitlines()[2:]

    def outcome(call: Any) -> tuple[type[BaseException], str] | None:
        try:
            call()
        except Exception as error:
            return type(error), str(error)
        return None

    def calls(recording: bool) -> None:  # recording: the enabled category's paths
        for call in bad_calls:
            error = outcome(lambda call=call: call(entry))
            assert error == outcome(lambda call=call: call(function))
            assert error is not None or not recording

    calls(recording=False)
    record(lambda: calls(recording=True))
    if name == "instant":
        assert outcome(lambda: entry(CAT, "")) == (pc.TracingError, "an instant event needs a name")


def test_a_counter_track_is_described_again_after_each_clear(record: Recorder) -> None:
    track = pc.CounterTrack("cleared")

    def body() -> None:
        pc.counter(CAT, track, 1)
        pc.counter(CAT, track, 2)
        for writer in thread_state().writers.values():
            assert writer is not None
            writer.clear_incremental_state()
        pc.counter(CAT, track, 3)
        pc.counter(CAT, "cleared too", 4)
        pc.counter(CAT, track, 5)

    trace = record(body)
    seen: list[object] = []  # the track's story on its sequence
    for packet in trace.trace.packet:
        if packet.sequence_flags & 1:  # SEQ_INCREMENTAL_STATE_CLEARED
            seen.append("cleared")
        elif packet.HasField("track_descriptor") and packet.track_descriptor.uuid == track.uuid:
            seen.append("described")
        elif packet.HasField("track_event") and packet.track_event.track_uuid == track.uuid:
            seen.append(packet.track_event.counter_value)
    assert seen == ["cleared", "described", 1, 2, "cleared", "described", 3, 5]
