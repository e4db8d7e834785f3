"""The track_event data source: running instances and each thread's writers for them."""

from __future__ import annotations

import contextlib
import functools
import os
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any, Protocol

try:
    import cython
except ImportError:  # installed without Cython: runs as pure Python
    from protozero import _cython_shim as cython

from perfetto_client._categories import Category, registry
from perfetto_client._track_event_writer import (
    PacketSink,
    ThreadTimeWriter,
    TrackEventWriter,
    clock_snapshot_packet,
)
from perfetto_client._tracks import ProcessTrack, ThreadTrack, Track

if cython.compiled:
    from cython.cimports.perfetto_client._thread_slot import (
        pc_cache_thread_state,
        pc_cached_thread_state,
        pc_forget_thread_states,
    )
    from cython.cimports.posix.time import clock_gettime, timespec


class _TraceWriter(PacketSink, Protocol):
    """What a TrackEventWriter needs of a perfetto_smb.TraceWriter."""

    on_resume: Callable[[], None] | None
    """Called when the writer writes again after dropping packets."""


__all__ = [
    "BOOTTIME_CLOCK",
    "TRACK_EVENT_DATA_SOURCE",
    "StartupInstance",
    "ThreadState",
    "TrackEventInstance",
    "describe_track",
    "forget_threads_after_fork",
    "now",
    "set_trace_clock",
    "slice_enter",
    "slice_exit",
    "thread_state",
    "thread_writers",
    "watch_thread_names",
    "write_event",
]

TRACK_EVENT_DATA_SOURCE = "track_event"

_CLOCK_BOOTTIME = 6
_CLOCK_MONOTONIC = 3

BOOTTIME_CLOCK: Callable[[], int] = functools.partial(time.clock_gettime_ns, time.CLOCK_BOOTTIME)
"""CLOCK_BOOTTIME in ns: the default trace clock."""

_clock: Callable[[], int] = BOOTTIME_CLOCK
_posix_clock = time.CLOCK_BOOTTIME
"""The POSIX clock id `_clock` reads (-1: another clock); compiled, `now` reads it directly."""


def set_trace_clock(clock: Callable[[], int]) -> None:
    """Sets the clock event timestamps are read from (BOOTTIME unless initialized otherwise)."""
    global _clock, _posix_clock  # noqa: PLW0603 - the hot paths read the clock as a module global
    _clock = clock
    if clock is BOOTTIME_CLOCK:
        _posix_clock = time.CLOCK_BOOTTIME
    elif clock is time.monotonic_ns:
        _posix_clock = time.CLOCK_MONOTONIC
    else:
        _posix_clock = -1


def now() -> int:
    """The trace clock's time (ns)."""
    if cython.compiled and _posix_clock >= 0:
        spec = cython.declare(timespec)
        clock_gettime(_posix_clock, cython.address(spec))
        ns: int = spec.tv_sec * 1_000_000_000 + spec.tv_nsec
        return ns
    return _clock()


class TrackEventInstance:
    """One session's instance of the track_event data source, on one backend's producer."""

    slot: int

    def __init__(
        self,
        instance_id: int,
        config: Any,
        create_trace_writer: Callable[[], _TraceWriter],
        *,
        use_monotonic_clock: bool = False,
    ) -> None:
        self.instance_id = instance_id
        self.config = config
        self._create_trace_writer = create_trace_writer
        self.slot = 0
        if use_monotonic_clock:
            self.clock_id = _CLOCK_MONOTONIC
            self.clock: Callable[[], int] = time.monotonic_ns
        else:
            self.clock_id = _CLOCK_BOOTTIME
            self.clock = BOOTTIME_CLOCK
        self.writers: weakref.WeakSet[TrackEventWriter] = weakref.WeakSet()
        self.stopped = False
        self.adopted_by: TrackEventInstance | None = None
        """For a startup instance: the session instance that takes over its sequences."""

    def adopt(self, writer: TrackEventWriter, packets: list[bytes]) -> bool:
        """Moves a startup sequence into this instance: its buffered packets are written
        into a new TraceWriter, which the sequence keeps writing to (same incremental
        state). False if no writer could be created."""
        try:
            trace_writer = self._create_trace_writer()
        except Exception:
            return False
        for packet in packets:
            trace_writer.write_packet(packet)
        writer.rebind(trace_writer)
        trace_writer.on_resume = writer.clear_incremental_state
        self.writers.add(writer)
        return True

    def new_writer(self, thread: ThreadTrack) -> TrackEventWriter | None:
        """A writer for the calling thread (None if the buffer is gone or writers ran out)."""
        try:
            trace_writer = self._create_trace_writer()
        except Exception:
            return None
        writer = self._writer(thread, trace_writer)
        # Packets dropped while the buffer was full may have held interned data or
        # descriptors: once it writes again, the sequence starts its incremental state over.
        trace_writer.on_resume = writer.clear_incremental_state
        return writer

    def _writer(self, thread: ThreadTrack, sink: PacketSink) -> TrackEventWriter:
        """A sequence of `thread` for this instance, writing into `sink`."""
        writer: TrackEventWriter
        if self.config.enable_thread_time_sampling:
            writer = ThreadTimeWriter(
                sink,
                clock=self.clock,
                clock_id=self.clock_id,
                thread_track_uuid=thread.uuid,
                reset_packets=_reset_packets_with_thread_time,
                subsampling_ns=self.config.thread_time_subsampling_ns,
            )
        else:
            writer = TrackEventWriter(
                sink,
                clock=self.clock,
                clock_id=self.clock_id,
                thread_track_uuid=thread.uuid,
                reset_packets=_reset_packets,
            )
        writer.thread_name = thread.name
        self.writers.add(writer)
        return writer

    def clear_incremental_state(self) -> None:
        """The service asked for incremental state to be re-emitted on every sequence."""
        for writer in list(self.writers):
            writer.clear_incremental_state()


class _MemorySink:
    """A startup sequence's packets, kept until a session adopts them."""

    def __init__(self, owner: StartupInstance) -> None:
        self.packets: list[bytes] = []
        self._owner = owner
        self.on_resume: Callable[[], None] | None = None
        """Unused: the sink keeps every packet, it never drops and resumes."""

    def write_packet(self, data: bytes) -> None:
        owner = self._owner
        if owner.buffered + len(data) <= owner.max_bytes:
            owner.buffered += len(data)
            self.packets.append(data)
        else:
            owner.dropped += 1

    def close(self) -> None:
        self.packets = []


class StartupInstance(TrackEventInstance):
    """Startup tracing: records before any session, into memory, for a session to adopt.

    Each thread's sequence is buffered (up to `max_bytes` in all); when a session's
    track_event instance starts, each thread hands its sequence over on its next event.
    """

    def __init__(self, config: Any, *, max_bytes: int, use_monotonic_clock: bool) -> None:
        self.max_bytes = max_bytes
        self.buffered = 0
        self.dropped = 0
        self._sinks: weakref.WeakKeyDictionary[TrackEventWriter, _MemorySink] = (
            weakref.WeakKeyDictionary()
        )
        super().__init__(0, config, self._new_sink, use_monotonic_clock=use_monotonic_clock)

    def _new_sink(self) -> _MemorySink:
        return _MemorySink(self)

    def new_writer(self, thread: ThreadTrack) -> TrackEventWriter | None:
        """A writer whose packets are kept in memory."""
        sink = _MemorySink(self)
        writer = self._writer(thread, sink)
        self._sinks[writer] = sink
        return writer

    def take_packets(self, writer: TrackEventWriter) -> list[bytes]:
        """The packets buffered for `writer`'s sequence (forgotten here)."""
        sink = self._sinks.pop(writer, None)
        if sink is None:
            return []
        packets, sink.packets = sink.packets, []
        return packets


def _reset_packets(writer: TrackEventWriter, ts: int) -> list[bytes]:
    """What a sequence writes when its incremental state starts over (upstream's order)."""
    return _incremental_state_packets(writer, ts, thread_time=False)


def _reset_packets_with_thread_time(writer: TrackEventWriter, ts: int) -> list[bytes]:
    """The same, for a sequence that samples thread time (with its counter track)."""
    return _incremental_state_packets(writer, ts, thread_time=True)


def _incremental_state_packets(
    writer: TrackEventWriter, ts: int, *, thread_time: bool
) -> list[bytes]:
    thread = ThreadTrack.current()
    writer.thread_name = thread.name
    process = ProcessTrack.current()
    writer.seen_tracks.add(thread.uuid)
    writer.seen_tracks.add(process.uuid)
    counter = thread.time_counter() if thread_time else None
    packets = [
        clock_snapshot_packet(
            ts, writer.clock_id, writer.thread_track_uuid, counter.uuid if counter else 0
        ),
        thread.descriptor_bytes(),
        process.descriptor_bytes(),
    ]
    if counter is not None:
        writer.seen_tracks.add(counter.uuid)
        packets.append(counter.descriptor_bytes())
    return packets


class ThreadState:
    """A thread's writers, one per running track event instance it wrote to."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.generation = -1
        self.writers: dict[TrackEventInstance, TrackEventWriter | None] = {}
        self.by_mask: dict[int, tuple[TrackEventWriter, ...]] = {}
        self.last_mask: int | None = None
        self.last_writers: tuple[TrackEventWriter, ...] = ()
        """The mask object `thread_writers` was last asked for and its `by_mask` entry."""
        self.track = ThreadTrack.current()

    def refresh(self) -> None:
        """Drops writers of instances that stopped (closing them) and the mask cache."""
        self.generation = registry.generation
        self.by_mask = {}
        self.last_mask = None
        running = set(registry.instances)
        for instance in [i for i in self.writers if i not in running]:
            writer = self.writers.pop(instance)
            if writer is None:
                continue
            successor = instance.adopted_by
            if (
                successor is not None
                and successor in running
                and successor not in self.writers
                and isinstance(instance, StartupInstance)
                and successor.adopt(writer, instance.take_packets(writer))
            ):
                self.writers[successor] = writer
            else:
                writer.close()
        name = threading.current_thread().name
        if name != self.track.name:
            self.track = ThreadTrack.current()
            descriptor = self.track.descriptor_bytes()
            for writer in self.writers.values():
                if writer is not None and not writer.cleared:
                    writer.thread_name = name
                    writer.write_raw(descriptor)  # re-described, as upstream's SDK

    def writers_for_mask(self, mask: int) -> tuple[TrackEventWriter, ...]:
        """The writers of the instances in `mask` (creating them), cached by mask."""
        out = []
        for instance in registry.instances:
            if mask & (1 << instance.slot):
                if instance not in self.writers:
                    self.writers[instance] = instance.new_writer(self.track)
                writer = self.writers[instance]
                if writer is not None:
                    out.append(writer)
        result = tuple(out)
        self.by_mask[mask] = result
        return result

    def __del__(self) -> None:
        if cython.compiled:
            pc_forget_thread_states()  # no thread's slot may point to a released state
        if self.pid != os.getpid():
            return  # a forked child: the writers belong to the parent's shared memory
        for writer in self.writers.values():
            if writer is not None:
                with contextlib.suppress(Exception):
                    writer.close()


_tls = threading.local()
"""Owns each thread's state (released when the thread ends); the compiled build also keeps a
pointer to it in a C thread-local slot (`_thread_slot.pxd`)."""


def _current_state() -> ThreadState:
    """The calling thread's state, created on first use."""
    if cython.compiled:
        cached = pc_cached_thread_state()
        if cached != cython.NULL:
            state: ThreadState = cython.cast(ThreadState, cached)
            return state
    try:
        state = _tls.state
    except AttributeError:
        state = _tls.state = ThreadState()
    if cython.compiled:
        pc_cache_thread_state(cython.cast(cython.p_void, state))
    return state


def thread_state() -> ThreadState:
    """The calling thread's state (created on first use, refreshed when sessions change)."""
    state = _current_state()
    if state.generation != registry.generation:
        state.refresh()
    return state


def thread_writers(mask: int) -> tuple[TrackEventWriter, ...]:
    """The calling thread's writers for the instances in `mask` (a Category's `mask`).

    This is how a hot caller gets its writers: `thread_writers(category.mask)` after
    checking `category.enabled`.
    """
    if cython.compiled:
        state = _current_state()
    else:  # the same lookup inline: a Python call costs the pure build about 60 ns an event
        try:
            state = _tls.state
        except AttributeError:
            state = _tls.state = ThreadState()
    if state.generation != registry.generation:
        state.refresh()
    if mask is state.last_mask:  # the same category as the last event's, mostly
        return state.last_writers
    writers = state.by_mask.get(mask)
    if writers is None:
        writers = state.writers_for_mask(mask)
    state.last_mask = mask
    state.last_writers = writers
    return writers


def slice_enter(cat: Category, key: int) -> tuple[TrackEventWriter, ...]:
    """Begins a slice of event key `key` on the thread's track, in every session recording
    `cat` (an enabled category); returns the writers `slice_exit` ends it in."""
    writers = thread_writers(cat.mask)
    ts = now()
    for writer in writers:
        writer.slice_begin(key, ts)
    return writers


def slice_exit(writers: tuple[TrackEventWriter, ...]) -> None:
    """Ends the innermost slice on the thread's track in `writers` (from `slice_enter`)."""
    ts = now()
    for writer in writers:
        writer.slice_end(ts)


_name_setter: Any = None
"""The `Thread.name` setter installed by `watch_thread_names`."""


def write_event(  # noqa: PLR0917 - the hot paths pass their state positionally
    writers: tuple[TrackEventWriter, ...],
    key: int,
    event_type: int,
    ts: int,
    track: Track | None,
    extra: bytes,
    iids: list[int],
) -> None:
    """Writes one event with encoded TrackEvent fields `extra` (annotation names `iids`) on
    `track`, described first where a sequence has not described it yet."""
    for writer in writers:
        if writer.cleared:
            writer.ensure_state(ts)
        if track is not None and track.uuid not in writer.seen_tracks:
            describe_track(writer, track, ts)
        interned = writer.interned_for(0, 0, iids) if iids else b""
        writer.event(key, event_type, ts, extra, interned)


def describe_track(writer: TrackEventWriter, track: Track, ts: int) -> None:
    """Emits the descriptors of `track` and its ancestors that `writer` has not emitted."""
    for item in track.lineage():
        if item.uuid not in writer.seen_tracks:
            writer.ensure_track(item.uuid, item.descriptor_bytes, ts)


def watch_thread_names() -> None:
    """Makes renaming a Python thread (`thread.name = ...`) re-describe its track: each
    thread re-reads its name before its next event."""
    global _name_setter  # noqa: PLW0603 - installed once per process
    current: Any = vars(threading.Thread)["name"]
    if not isinstance(current, property) or current.fset is _name_setter:
        return
    set_name = current.fset
    assert set_name is not None

    def renamed(thread: threading.Thread, name: str) -> None:
        set_name(thread, name)
        registry.threads_renamed()

    _name_setter = renamed
    setattr(threading.Thread, "name", property(current.fget, renamed, doc=current.__doc__))  # noqa: B010


def forget_threads_after_fork() -> None:
    """In a forked child: no thread may reach the parent's writers."""
    global _tls  # noqa: PLW0603 - a forked child gets fresh thread-local storage
    try:
        state: ThreadState = _tls.state
    except AttributeError:
        pass
    else:
        state.writers.clear()
        state.by_mask.clear()
        state.last_mask = None
    _tls = threading.local()
    if cython.compiled:
        pc_forget_thread_states()
