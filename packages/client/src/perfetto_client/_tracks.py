"""Tracks: the timelines events go on, each described once per sequence by a TrackDescriptor."""

from __future__ import annotations

import enum
import os
import sys
import threading
from typing import TYPE_CHECKING

from perfetto_client._track_event_writer import (
    counter_descriptor,
    process_descriptor_packet,
    thread_descriptor_packet,
    track_descriptor_packet,
    track_uuid_field,
)

if TYPE_CHECKING:
    from perfetto_protos.trace.trace_packet_pb2 import TracePacket

__all__ = [
    "CounterTrack",
    "CounterUnit",
    "NamedTrack",
    "ProcessTrack",
    "ThreadTimeTrack",
    "ThreadTrack",
    "Track",
    "given_process_name",
    "process_uuid",
    "reset_process_uuid",
    "set_process_name",
]

_U64 = (1 << 64) - 1
_process_uuid = int.from_bytes(os.urandom(8), "little") >> 1 | 1


def process_uuid() -> int:
    """The uuid of this process's track (random, new in a forked child)."""
    return _process_uuid


def reset_process_uuid() -> None:
    """Draws a new process uuid (after fork: the child is another process)."""
    global _process_uuid  # noqa: PLW0603 - a forked child is another process
    _process_uuid = int.from_bytes(os.urandom(8), "little") >> 1 | 1


def _hash64(*parts: object) -> int:
    # hashlib: 3 ms of CPU that `import perfetto_client` does not pay.
    import hashlib

    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


_process_name_override = ""


def set_process_name(name: str) -> None:
    """Names this process's track `name` instead of after its program ("": the program)."""
    global _process_name_override  # noqa: PLW0603 - one name per process
    _process_name_override = name


def given_process_name() -> str:
    """The name `set_process_name` gave this process ("" if none)."""
    return _process_name_override


def _process_name() -> str:
    if _process_name_override:
        return _process_name_override
    argv0 = sys.argv[0] if sys.argv and sys.argv[0] else sys.executable
    return os.path.basename(argv0) or "python"


class Track:
    """A track with an explicit id, under `parent` (the process track by default).

    Its uuid is `id ^ parent.uuid`, as upstream's `Track(id, parent)`; with `parent=None`
    the track is global (`Track.global_track(id)`), shared by every process that uses the
    same id. Compiled (`_tracks.pxd`), the uuid, parent and `event_fields` are read and
    called from C by the compiled event paths; subclasses may override `event_fields`.
    """

    uuid: int
    parent_uuid: int
    parent: Track | None
    _uuid_field: bytes | None
    """`uuid_field` once computed, else None (compiled: a C field the counter path reads)."""

    def __init__(self, track_id: int, parent: Track | _Default | None = None) -> None:
        parent_uuid = _parent_uuid(parent)
        self.uuid = (track_id ^ parent_uuid) & _U64 if parent_uuid else track_id & _U64
        self.parent_uuid = parent_uuid
        self.parent = parent if isinstance(parent, Track) else None
        self._uuid_field = None

    def descriptor_bytes(self) -> bytes:
        """The encoded descriptor packet (computed once per track object)."""
        cached: bytes | None = getattr(self, "_descriptor_bytes", None)
        if cached is None:
            name, counter = self._described()
            cached = self._descriptor_bytes = track_descriptor_packet(
                self.uuid, self.parent_uuid, name, counter
            )
        return cached

    def _described(self) -> tuple[str | None, bytes | None]:
        """The track's name (None: unnamed) and encoded CounterDescriptor (None: none)."""
        return None, None

    def lineage(self) -> tuple[Track, ...]:
        """This track's custom ancestors, outermost first, then the track itself."""
        cached: tuple[Track, ...] | None = getattr(self, "_lineage", None)
        if cached is None:
            out: list[Track] = []
            track: Track | None = self
            while track is not None:
                out.append(track)
                track = track.parent
            out.reverse()
            cached = self._lineage = tuple(out)
        return cached

    @property
    def uuid_field(self) -> bytes:
        """The encoded TrackEvent.track_uuid field naming this track (computed once per
        track object)."""
        cached: bytes | None = getattr(self, "_uuid_field", None)
        if cached is None:
            cached = self._uuid_field = track_uuid_field(self.uuid)
        return cached

    def event_fields(self, event_type: int) -> bytes:
        """The TrackEvent fields putting an event of `event_type` on this track (its
        track_uuid field, whatever the type)."""
        field: bytes = self.uuid_field
        return field

    @classmethod
    def global_track(cls, track_id: int) -> Track:
        """A track that is the same in every process (no parent)."""
        return cls(track_id, parent=GLOBAL)

    def descriptor(self) -> TracePacket:
        """The TracePacket describing this track (decoded with protobuf: events never need
        it, they write `descriptor_bytes()`)."""
        # protobuf: 68 ms of CPU, for this debugging view only.
        from perfetto_protos.trace.trace_packet_pb2 import TracePacket

        return TracePacket.FromString(self.descriptor_bytes())


class _Default(enum.Enum):
    GLOBAL = "global"


GLOBAL = _Default.GLOBAL
"""Pass as `parent` for a track with no parent (a global track)."""


def _parent_uuid(parent: Track | _Default | None) -> int:
    if parent is GLOBAL:
        return 0
    if parent is None:
        return ProcessTrack.current().uuid
    assert isinstance(parent, Track)
    return parent.uuid


class ProcessTrack(Track):
    """The track of this process (named after the program, with pid and command line)."""

    def __init__(self) -> None:
        self.uuid = _process_uuid
        self.parent_uuid = 0
        self.parent = None

    @classmethod
    def current(cls) -> ProcessTrack:
        """The track of the calling process."""
        return cls()

    def descriptor_bytes(self) -> bytes:
        """The encoded descriptor packet (with the process's current name)."""
        return process_descriptor_packet(self.uuid, os.getpid(), _process_name(), sys.orig_argv)


class ThreadTrack(Track):
    """The track of one thread of this process (its events' default track)."""

    def __init__(self, tid: int, name: str = "") -> None:
        self.tid = tid
        self.name = name
        self.uuid = (tid ^ _process_uuid) & _U64
        self.parent_uuid = _process_uuid
        self.parent = None

    @classmethod
    def current(cls) -> ThreadTrack:
        """The track of the calling thread (named after `threading.current_thread()`)."""
        return cls(threading.get_native_id(), threading.current_thread().name)

    def time_counter(self) -> CounterTrack:
        """The thread's CPU time counter track (upstream's "thread_time", incremental ns)."""
        return ThreadTimeTrack(self)

    def descriptor_bytes(self) -> bytes:
        """The encoded descriptor packet."""
        return thread_descriptor_packet(
            self.uuid, self.parent_uuid, os.getpid(), self.tid, self.name
        )


class NamedTrack(Track):
    """A track with a name (and an optional id to tell same-named tracks apart).

    Under the process track by default; `parent` may be any track, or `GLOBAL`.
    """

    def __init__(
        self, name: str, track_id: int = 0, parent: Track | _Default | None = None
    ) -> None:
        self.name = name
        super().__init__(_hash64("named", name, track_id), parent)

    def _described(self) -> tuple[str | None, bytes | None]:
        return self.name, None


class CounterUnit(enum.IntEnum):
    """CounterDescriptor.Unit."""

    UNSPECIFIED = 0
    TIME_NS = 1
    COUNT = 2
    SIZE_BYTES = 3


class CounterTrack(Track):
    """A track of counter values: `counter(category, track, value)` adds a point.

    `unit` is a CounterUnit or a free-form unit name; values are multiplied by
    `unit_multiplier` when shown; `is_incremental` tracks get deltas.
    """

    def __init__(
        self,
        name: str,
        *,
        unit: CounterUnit | str = CounterUnit.UNSPECIFIED,
        unit_multiplier: int = 1,
        is_incremental: bool = False,
        track_id: int = 0,
        parent: Track | _Default | None = None,
    ) -> None:
        self.name = name
        self.unit = unit
        self.unit_multiplier = unit_multiplier
        self.is_incremental = is_incremental
        super().__init__(_hash64("counter", name, track_id), parent)

    def _described(self) -> tuple[str | None, bytes | None]:
        return self.name, self._counter_fields(0)

    def _counter_fields(self, counter_type: int) -> bytes:
        """The encoded CounterDescriptor of this track, of CounterDescriptor.type `counter_type`."""
        if isinstance(self.unit, CounterUnit):
            unit, unit_name = int(self.unit), ""
        else:
            unit, unit_name = 0, self.unit
        return counter_descriptor(
            counter_type, unit, unit_name, self.unit_multiplier, self.is_incremental
        )


class ThreadTimeTrack(CounterTrack):
    """A thread's CPU time in ns (CounterDescriptor type COUNTER_THREAD_TIME_NS), as deltas."""

    def __init__(self, thread: ThreadTrack) -> None:
        super().__init__("thread_time", is_incremental=True, parent=thread)

    def _described(self) -> tuple[str | None, bytes | None]:
        return self.name, self._counter_fields(1)  # COUNTER_THREAD_TIME_NS
