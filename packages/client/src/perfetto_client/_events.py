"""The track event API: slices (`trace`, `trace_event`, `begin`/`end`), instants, counters
and flows, written through the calling thread's writers of the track_event data source (on
the running asyncio task's track, `_task_tracks`, where no `track=` is given).

Compiled (`_events.pxd`), the hot paths (`@trace`, `trace_event`, `instant`, `counter`) call
`_track_event`'s thread state and clock in C.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, overload

try:
    import cython
except ImportError:  # installed without Cython: runs as pure Python
    from protozero import _cython_shim as cython

from perfetto_client._categories import Category, category_of, registry
from perfetto_client._errors import TracingError
from perfetto_client._task_tracks import task_track, traced_coroutine
from perfetto_client._traced_function import COMPILED, TracedFunction
from perfetto_client._traced_wrapper import traced_wrapper
from perfetto_client._track_event_writer import (
    TYPE_INSTANT,
    TYPE_SLICE_BEGIN,
    TYPE_SLICE_END,
    TrackEventWriter,
    flow_fields,
    varint,
)
from perfetto_client._tracks import CounterTrack, Track, process_uuid
from perfetto_client._vectorcall_function import VectorcallFunction

if cython.compiled:
    from cython.cimports.perfetto_client._vectorcall import (
        PyVectorcall_NARGS,
        pc_tuple_of,
        pc_vectorcall,
    )
else:  # compiled, _events.pxd cimports them from _track_event and _debug_annotations
    from perfetto_client._debug_annotations import encode_annotations, put_annotated_event
    from perfetto_client._track_event import describe_track, now, thread_writers, write_event

if TYPE_CHECKING:
    from perfetto_protos.trace.track_event.track_event_pb2 import TrackEvent

__all__ = [
    "Flow",
    "FlowArg",
    "NoSlice",
    "Slice",
    "begin",
    "counter",
    "end",
    "instant",
    "is_enabled",
    "thread_slice",
    "trace",
    "trace_event",
    "track_slice",
]

_traced: Callable[[Callable[..., Any], Category, int], Any] = (
    TracedFunction if COMPILED else traced_wrapper
)
"""What `@trace` makes of a function (not a coroutine function): the compiled build's
vectorcall object or the pure build's function with the function's own signature."""


P = ParamSpec("P")
R = TypeVar("R")

_CORRELATION_ID = b"\xa0\x03"  # TrackEvent.correlation_id (52)
_CORRELATION_ID_STR = b"\xaa\x03"  # TrackEvent.correlation_id_str (53)


def is_enabled(category: str | Category) -> bool:
    """Whether any running session records events of `category`."""
    return registry.is_enabled(category)


class Flow:
    """Links events into a flow (arrows in the UI): pass as `flow=` or `terminating_flow=`.

    `Flow(id)` is scoped to this process (two processes using the same id do not collide);
    `Flow.global_flow(id)` is the same id in every process.
    """

    __slots__ = ("id",)

    def __init__(self, flow_id: int, *, process_scoped: bool = True) -> None:
        self.id = (flow_id ^ process_uuid()) if process_scoped else flow_id
        self.id &= (1 << 64) - 1

    @classmethod
    def process_flow(cls, flow_id: int) -> Flow:
        """A flow id local to this process."""
        return cls(flow_id)

    @classmethod
    def global_flow(cls, flow_id: int) -> Flow:
        """A flow id shared by every process."""
        return cls(flow_id, process_scoped=False)

    def __repr__(self) -> str:
        return f"Flow(id={self.id:#x})"


FlowArg = Flow | Iterable[Flow] | None


def _flow_ids(flow: FlowArg) -> tuple[int, ...]:
    if flow is None:
        return ()
    if isinstance(flow, Flow):
        return (flow.id,)
    return tuple(f.id for f in flow)


_CO_COROUTINE = 0x80
_NO_IIDS: list[int] = []
"""The annotation names of a slice without encoded args (never changed)."""


class Slice:
    """What `trace_event` returns for an enabled category: a slice around the `with` body."""

    __slots__ = ("_cat", "_extra", "_iids", "_key", "_names", "_track", "_values", "_writers")

    def __init__(
        self,
        cat: Category,
        key: int,
        track: Track | None,
        extra: bytes,
        iids: list[int],
    ) -> None:
        self._cat = cat
        self._key = key
        self._track = track
        self._extra = extra
        self._iids = iids
        self._names: tuple[str, ...] | None = None
        """Compiled: the names of args not encoded yet (each writer encodes them into its
        chunk), their values in `_values`."""
        self._values: tuple[object, ...] = ()
        self._writers: tuple[TrackEventWriter, ...] = ()

    @cython.locals(writers=tuple, writer=TrackEventWriter, ts="long long")  # type: ignore[untyped-decorator]
    def __enter__(self) -> Slice:
        writers = self._writers = thread_writers(self._cat.mask)
        ts = now()
        names = self._names
        if names is not None:
            for writer in writers:
                if not put_annotated_event(
                    writer, self._key, TYPE_SLICE_BEGIN, ts, names, self._values
                ):
                    extra, iids = encode_annotations(dict(zip(names, self._values, strict=True)))
                    write_event((writer,), self._key, TYPE_SLICE_BEGIN, ts, None, extra, iids)
        elif self._track is None and not self._extra:
            for writer in writers:
                writer.slice_begin(self._key, ts)
        else:
            write_event(
                writers, self._key, TYPE_SLICE_BEGIN, ts, self._track, self._extra, self._iids
            )
        return self

    @cython.locals(writer=TrackEventWriter, ts="long long", track=Track)  # type: ignore[untyped-decorator]
    def __exit__(self, exc_type: object, exc: object, traceback: object) -> None:
        ts = now()
        track = self._track
        if track is None:
            for writer in self._writers:
                writer.slice_end(ts)
            return
        extra = track.event_fields(TYPE_SLICE_END)
        for writer in self._writers:
            writer.event(0, TYPE_SLICE_END, ts, extra, b"")


def thread_slice(cat: Category, name: str, args: dict[str, object]) -> Slice:
    """The slice `name` of enabled category `cat` on the thread's track, with args `args`."""
    if args and cython.compiled:
        return _thread_slice(cat, name, tuple(args), tuple(args.values()))
    out = _thread_slice(cat, name, None, ())
    if args:
        out._extra, out._iids = encode_annotations(args)
    return out


def _thread_slice(
    cat: Category, name: str, names: tuple[str, ...] | None, values: tuple[object, ...]
) -> Slice:
    """The slice `name` of enabled category `cat` on the thread's track, with the args of
    names `names` (None: none) and values `values`, encoded as each writer begins it."""
    keys = cat.keys
    key = keys.get(name)
    if key is None:
        key = cat.event_key(name)
    out = Slice.__new__(Slice)
    out._cat = cat
    out._key = key
    out._track = None
    out._writers = ()
    out._names = names
    out._values = values
    out._extra = b""
    out._iids = _NO_IIDS
    return out


def track_slice(cat: Category, name: str, track: Track, args: dict[str, object]) -> Slice:
    """The slice `name` of enabled category `cat` on `track`, with args `args`."""
    keys = cat.keys
    key = keys.get(name)
    if key is None:
        key = cat.event_key(name)
    extra = track.event_fields(TYPE_SLICE_BEGIN)
    iids: list[int] = []
    if args:
        encoded, iids = encode_annotations(args)
        extra += encoded
    return Slice(cat, key, track, extra, iids)


class NoSlice:
    """What `trace_event` returns for a disabled category."""

    __slots__ = ()

    def __enter__(self) -> NoSlice:
        return self

    def __exit__(self, exc_type: object, exc: object, traceback: object) -> None:
        return None


_NO_SLICE = NoSlice()


class TraceEventFunction(VectorcallFunction):
    """What `trace_event` is in the compiled build: the function, called as a vectorcall that
    makes the slice of a call with a category, a name and args alone (most calls) from the
    call's own keyword names and values, without the dict the function's `**args` makes (a
    `VectorcallFunction`: the function's name, doc, repr and pickling)."""

    def __init__(self, fn: Callable[..., Slice | NoSlice]) -> None:
        super().__init__(fn)
        if cython.compiled:
            self._use_vectorcall(cython.cast(cython.p_void, _trace_event_vectorcall))


_OPTIONS = frozenset(("track", "flow", "terminating_flow", "correlation_id", "proto"))
"""trace_event's keyword-only parameters: any other keyword is an arg."""


@cython.locals(cat=Category, names=tuple, nargs="Py_ssize_t")  # type: ignore[untyped-decorator]
def _trace_event_vectorcall(self: TraceEventFunction, args: Any, nargsf: int, kwnames: Any) -> Any:
    """`trace_event` as the compiled build's vectorcall: a call with a category, a name and
    args (keywords other than the function's options) alone, outside asyncio tasks, makes its
    slice here; any other goes to the function."""
    nargs = PyVectorcall_NARGS(nargsf)
    if nargs != 2 or type(cython.cast(object, args[1])) is not str:
        return pc_vectorcall(self._fn, args, nargsf, kwnames)
    category = cython.cast(object, args[0])
    cat = category if isinstance(category, Category) else category_of(category)
    if not cat.enabled:
        return _NO_SLICE
    if kwnames == cython.NULL:
        names = None
    else:
        names = cython.cast(tuple, kwnames)
        for kw in names:
            if type(kw) is not str or kw in _OPTIONS:
                return pc_vectorcall(self._fn, args, nargsf, kwnames)
    if _task_may_be_current():  # maybe on the task's track
        return pc_vectorcall(self._fn, args, nargsf, kwnames)
    name = cython.cast(object, args[1])
    if names is None:
        return _thread_slice(cat, name, None, ())
    return _thread_slice(cat, name, names, pc_tuple_of(args + 2, len(names)))


def _trace_event_entry(fn: Callable[P, Slice | NoSlice]) -> Callable[P, Slice | NoSlice]:
    """`trace_event` as a `TraceEventFunction` where compiled, as itself in the pure build."""
    return TraceEventFunction(fn) if cython.compiled else fn


@_trace_event_entry
@cython.locals(cat=Category)  # type: ignore[untyped-decorator]
def trace_event(
    category: str | Category,
    name: str,
    /,
    *,
    track: Track | None = None,
    flow: FlowArg = None,
    terminating_flow: FlowArg = None,
    correlation_id: int | str | None = None,
    proto: Callable[[TrackEvent], None] | None = None,
    **args: object,
) -> Slice | NoSlice:
    """A context manager recording a slice `name` around its body; keyword arguments are args.

    Inside an asyncio task the slice goes on the task's track, so it survives awaits.
    """
    cat = category if isinstance(category, Category) else category_of(category)
    if not cat.enabled:
        return _NO_SLICE
    if (
        track is None
        and flow is None
        and terminating_flow is None
        and correlation_id is None
        and proto is None
        and not _task_may_be_current()
    ):
        return thread_slice(cat, name, args)
    if (
        track is not None
        and flow is None
        and terminating_flow is None
        and correlation_id is None
        and proto is None
    ):
        return track_slice(cat, name, track, args)
    return custom_slice(cat, name, track, flow, terminating_flow, correlation_id, proto, args)


_modules: dict[str, types.ModuleType] = sys.modules
_running_loop_getter: Callable[[], object] | None = None
_current_tasks: dict[object, object] | None = None
"""asyncio's mapping of each event loop to its current task, the one `asyncio.current_task`
reads (3.11-3.13; 3.14 keeps a thread's current task in its thread state): empty while no
task runs on any thread."""
_TASKS_MAPPED = sys.version_info < (3, 14)


def _find_asyncio() -> bool:
    """Finds asyncio's running-loop getter and current-tasks mapping once asyncio is imported
    (whether it is)."""
    global _running_loop_getter, _current_tasks  # noqa: PLW0603 - found once, then read from C
    tasks = getattr(_modules.get("asyncio"), "tasks", None)  # set once asyncio.tasks has run
    if tasks is None:  # not imported, or being imported: no task can be current
        return False
    _running_loop_getter = tasks.events._get_running_loop  # asyncio.events ran before it
    if _TASKS_MAPPED:
        _current_tasks = tasks._current_tasks
    return True


def _task_may_be_current() -> bool:
    """Whether an asyncio task may be current on this thread (events without `track=` then go
    on its track): not while no task is current on any thread, else whether an event loop
    runs on this thread."""
    if _running_loop_getter is None and not _find_asyncio():
        return False
    if _current_tasks is not None and not _current_tasks:
        return False
    return _running_loop_getter() is not None  # type: ignore[misc]


@cython.locals(writers=tuple, writer=TrackEventWriter, ts="long long", on=Track, keys=dict)  # type: ignore[untyped-decorator]
def _put_instant(cat: Category, name: str, track: Track | None, timestamp: int | None) -> None:
    """Writes the instant `name` of enabled category `cat`, with no field but its track, on the
    thread's track (or `track`)."""
    keys = cat.keys
    key = keys.get(name)
    if key is None:
        key = cat.event_key(name)
    writers = thread_writers(cat.mask)
    ts = now() if timestamp is None else timestamp
    if track is None:
        for writer in writers:
            writer.instant(key, ts)
    elif writers:
        on = track
        write_event(writers, key, TYPE_INSTANT, ts, on, on.event_fields(TYPE_INSTANT), [])


class InstantFunction(VectorcallFunction):
    """What `instant` is in the compiled build: the function, called as a vectorcall that
    records a call with a category and a name alone (most calls) without the dict the
    function's `**args` makes on every call (a `VectorcallFunction`: the function's name, doc,
    repr and pickling)."""

    def __init__(self, fn: Callable[..., None]) -> None:
        super().__init__(fn)
        if cython.compiled:
            self._use_vectorcall(cython.cast(cython.p_void, _instant_vectorcall))


@cython.locals(cat=Category)  # type: ignore[untyped-decorator]
def _instant_vectorcall(self: InstantFunction, args: Any, nargsf: int, kwnames: Any) -> Any:
    """`instant` as the compiled build's vectorcall: a call with a category and a non-empty
    name alone, outside asyncio tasks, goes straight to the writers; any other to the
    function."""
    if kwnames or PyVectorcall_NARGS(nargsf) != 2 or type(cython.cast(object, args[1])) is not str:
        return pc_vectorcall(self._fn, args, nargsf, kwnames)
    category = cython.cast(object, args[0])
    name = cython.cast(object, args[1])
    cat = category if type(category) is Category else category_of(category)
    if not name:  # the function's error
        return pc_vectorcall(self._fn, args, nargsf, kwnames)
    if not cat.enabled:
        return None
    if _task_may_be_current():  # maybe on the task's track
        return pc_vectorcall(self._fn, args, nargsf, kwnames)
    _put_instant(cat, name, None, None)
    return None


def _instant_entry(fn: Callable[P, None]) -> Callable[P, None]:
    """`instant` as an `InstantFunction` where compiled, as itself in the pure build."""
    return InstantFunction(fn) if cython.compiled else fn


@_instant_entry
@cython.locals(cat=Category)  # type: ignore[untyped-decorator]
def instant(
    category: str | Category,
    name: str,
    /,
    *,
    track: Track | None = None,
    timestamp: int | None = None,
    flow: FlowArg = None,
    terminating_flow: FlowArg = None,
    correlation_id: int | str | None = None,
    proto: Callable[[TrackEvent], None] | None = None,
    **args: object,
) -> None:
    """Records an instant event `name` on the thread's track (or `track`)."""
    cat = category if type(category) is Category else category_of(category)
    if (
        cat.enabled
        and name
        and flow is None
        and terminating_flow is None
        and correlation_id is None
        and proto is None
        and not args
        and (track is not None or not _task_may_be_current())
    ):
        _put_instant(cat, name, track, timestamp)
        return
    if not name:
        raise TracingError("an instant event needs a name")
    if not cat.enabled:
        return
    _event(
        cat,
        name,
        TYPE_INSTANT,
        track,
        timestamp,
        flow,
        terminating_flow,
        correlation_id,
        proto,
        args,
    )


_counter_tracks: dict[str, CounterTrack] = {}


@cython.locals(writers=tuple, ts="long long", field=bytes, writer=TrackEventWriter, on=Track)  # type: ignore[untyped-decorator]
def _put_counter(
    cat: Category, track: CounterTrack | str, value: float, timestamp: int | None
) -> None:
    """Adds the point `value` of enabled category `cat` to counter track `track` (a name: the
    CounterTrack of that name under the process track)."""
    if isinstance(track, str):
        found = _counter_tracks.get(track)
        if found is None:
            found = _counter_tracks[track] = CounterTrack(track)
        track = found
    elif not isinstance(track, Track):
        raise TypeError(f"counter's track is a CounterTrack or a name, not {type(track).__name__}")
    on = track  # a Track: compiled, its fields are read in C
    field = on._uuid_field  # `uuid_field` once computed
    if field is None:
        field = on.uuid_field
    uuid = on.uuid
    writers = thread_writers(cat.mask)
    ts = now() if timestamp is None else timestamp
    for writer in writers:
        if writer.cleared:
            writer.ensure_state(ts)
        if track is not writer.counter_track:  # else described on this sequence
            if uuid not in writer.seen_tracks:  # else its ancestors were described before it
                describe_track(writer, track, ts)
            writer.counter_track = track
        writer.counter(field, value, ts)


class CounterFunction(VectorcallFunction):
    """What `counter` is in the compiled build: the function, called as a vectorcall that
    records a call of three positional arguments (most calls) without parsing keywords (a
    `VectorcallFunction`: the function's name, doc, repr and pickling)."""

    def __init__(self, fn: Callable[..., None]) -> None:
        super().__init__(fn)
        if cython.compiled:
            self._use_vectorcall(cython.cast(cython.p_void, _counter_vectorcall))


@cython.locals(cat=Category)  # type: ignore[untyped-decorator]
def _counter_vectorcall(self: CounterFunction, args: Any, nargsf: int, kwnames: Any) -> Any:
    """`counter` as the compiled build's vectorcall: a call of a category, a track and a value
    goes straight to the writers; any other to the function."""
    if kwnames or PyVectorcall_NARGS(nargsf) != 3:
        return pc_vectorcall(self._fn, args, nargsf, kwnames)
    category = cython.cast(object, args[0])
    cat = category if isinstance(category, Category) else category_of(category)
    if cat.enabled:
        _put_counter(cat, cython.cast(object, args[1]), cython.cast(object, args[2]), None)
    return None


def _counter_entry(fn: Callable[P, None]) -> Callable[P, None]:
    """`counter` as a `CounterFunction` where compiled, as itself in the pure build."""
    return CounterFunction(fn) if cython.compiled else fn


@_counter_entry
@cython.locals(cat=Category)  # type: ignore[untyped-decorator]
def counter(
    category: str | Category,
    track: CounterTrack | str,
    value: float,
    *,
    timestamp: int | None = None,
) -> None:
    """Adds a point to a counter track (a CounterTrack, or a name under the process track).

    An int value is recorded as an int64 counter value, a float as a double.
    """
    cat = category if isinstance(category, Category) else category_of(category)
    if cat.enabled:
        _put_counter(cat, track, value, timestamp)


def _extra_fields(
    track: Track | None,
    event_type: int,
    args: dict[str, object],
    *,
    flow: FlowArg,
    terminating_flow: FlowArg,
    correlation_id: int | str | None,
    proto: Callable[[TrackEvent], None] | None,
) -> tuple[bytes, list[int]]:
    """Encoded TrackEvent fields beyond type/category/name, and the annotation names used."""
    out = b""
    iids: list[int] = []
    if track is not None:
        out += track.event_fields(event_type)
    if args:
        encoded, iids = encode_annotations(args)
        out += encoded
    if flow is not None or terminating_flow is not None:
        out += flow_fields(_flow_ids(flow), _flow_ids(terminating_flow))
    if correlation_id is not None:
        if isinstance(correlation_id, str):
            data = correlation_id.encode()
            out += _CORRELATION_ID_STR + varint(len(data)) + data
        else:
            out += _CORRELATION_ID + varint(correlation_id & ((1 << 64) - 1))
    if proto is not None:
        # protobuf: 39 ms of CPU, paid by the first `proto=` only.
        from perfetto_protos.trace.track_event.track_event_pb2 import TrackEvent

        message = TrackEvent()
        proto(message)
        out += message.SerializeToString()
    return out, iids


def _event(  # noqa: PLR0917 - positional: a call with ten keywords costs more than the event
    cat: Category,
    name: str,
    event_type: int,
    track: Track | None,
    timestamp: int | None,
    flow: FlowArg,
    terminating_flow: FlowArg,
    correlation_id: int | str | None,
    proto: Callable[[TrackEvent], None] | None,
    args: dict[str, object],
) -> None:
    """Writes one event of an enabled category on the calling thread's writers (the general
    path of begin, end and instant)."""
    writers = thread_writers(cat.mask)
    if not writers:
        return
    ts = now() if timestamp is None else timestamp
    if track is None:
        track = task_track()
    key = cat.event_key(name) if name else 0
    if (
        key == 0
        and event_type == TYPE_SLICE_END
        and track is None
        and not args
        and flow is None
        and terminating_flow is None
    ):
        for writer in writers:
            writer.slice_end(ts)
        return
    if (
        event_type == TYPE_SLICE_BEGIN
        and track is None
        and not args
        and proto is None
        and flow is None
        and terminating_flow is None
        and correlation_id is None
    ):
        for writer in writers:
            writer.slice_begin(key, ts)
        return
    extra, iids = _extra_fields(
        track,
        event_type,
        args,
        flow=flow,
        terminating_flow=terminating_flow,
        correlation_id=correlation_id,
        proto=proto,
    )
    write_event(writers, key, event_type, ts, track, extra, iids)


@cython.locals(cat=Category)  # type: ignore[untyped-decorator]
def _record(  # noqa: PLR0917 - positional: a call with ten keywords costs more than the event
    event_type: int,
    category: str | Category,
    name: str,
    track: Track | None,
    timestamp: int | None,
    flow: FlowArg,
    terminating_flow: FlowArg,
    correlation_id: int | str | None,
    proto: Callable[[TrackEvent], None] | None,
    args: dict[str, object],
) -> None:
    """Writes one event if `category` is enabled (what begin, end and instant share)."""
    cat = category if type(category) is Category else category_of(category)
    if cat.enabled:
        _event(
            cat,
            name,
            event_type,
            track,
            timestamp,
            flow,
            terminating_flow,
            correlation_id,
            proto,
            args,
        )


def begin(
    category: str | Category,
    name: str,
    /,
    *,
    track: Track | None = None,
    timestamp: int | None = None,
    flow: FlowArg = None,
    terminating_flow: FlowArg = None,
    correlation_id: int | str | None = None,
    proto: Callable[[TrackEvent], None] | None = None,
    **args: object,
) -> None:
    """Begins a slice `name` on the thread's track (or `track`); keyword arguments are its args.

    `timestamp` is in ns on the trace clock (CLOCK_BOOTTIME unless initialized with
    `use_monotonic_clock`); `proto` gets the TrackEvent message being written.
    """
    if not name:
        raise TracingError("a slice needs a name")
    _record(
        TYPE_SLICE_BEGIN,
        category,
        name,
        track,
        timestamp,
        flow,
        terminating_flow,
        correlation_id,
        proto,
        args,
    )


def end(
    category: str | Category,
    /,
    *,
    track: Track | None = None,
    timestamp: int | None = None,
    flow: FlowArg = None,
    terminating_flow: FlowArg = None,
    **args: object,
) -> None:
    """Ends the innermost open slice of the thread's track (or of `track`)."""
    _record(
        TYPE_SLICE_END, category, "", track, timestamp, flow, terminating_flow, None, None, args
    )


def custom_slice(  # noqa: PLR0917 - trace_event passes its arguments positionally
    cat: Category,
    name: str,
    track: Track | None,
    flow: FlowArg,
    terminating_flow: FlowArg,
    correlation_id: int | str | None,
    proto: Callable[[TrackEvent], None] | None,
    args: dict[str, object],
) -> Slice:
    """The slice `trace_event` returns for an enabled category when it goes on another track
    than the thread's (an explicit one, or the running asyncio task's) or carries more than
    args."""
    if track is None:
        track = task_track()
    extra, iids = _extra_fields(
        track,
        TYPE_SLICE_BEGIN,
        args,
        flow=flow,
        terminating_flow=terminating_flow,
        correlation_id=correlation_id,
        proto=proto,
    )
    return Slice(cat, cat.event_key(name), track, extra, iids)


@overload
def trace(category: Callable[P, R], name: None = None) -> Callable[P, R]: ...


@overload
def trace(
    category: str | Category = ..., name: str | None = None
) -> Callable[[Callable[P, R]], Callable[P, R]]: ...


def trace(
    category: str | Category | Callable[P, R] = "default",
    name: str | None = None,
) -> Callable[P, R] | Callable[[Callable[P, R]], Callable[P, R]]:
    """Decorator: each call of the function is a slice named after its qualified name.

    `@trace("cat")`, `@trace("cat", "name")`, or bare `@trace` (category "default").
    A coroutine function's slice goes on its task's track and spans its awaits.
    """
    if callable(category) and not isinstance(category, Category):
        return _decorate(registry.static_category("default"), None, category)
    cat = category_of(category)

    def decorator(fn: Callable[P, R]) -> Callable[P, R]:
        return _decorate(cat, name, fn)

    return decorator


def _decorate(cat: Category, name: str | None, fn: Callable[P, R]) -> Callable[P, R]:
    slice_name = name or getattr(fn, "__qualname__", None) or repr(fn)
    key = cat.event_key(slice_name)
    code = getattr(fn, "__code__", None)
    if code is not None and code.co_flags & _CO_COROUTINE:
        return traced_coroutine(cat, key, fn)  # type: ignore[arg-type, return-value]

    traced: Callable[P, R] = _traced(fn, cat, key)
    return traced
