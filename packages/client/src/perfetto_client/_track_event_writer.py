"""Encodes track events of one thread into one TraceWriter (one sequence), as upstream's SDK.

Every packet is assembled here from precomputed tag bytes, interned ids and a per-sequence
cache of each event's encoded tail: compiled, straight into the chunk of the sequence's
perfetto_smb TraceWriter where it fits (`_chunk_packets`), else as bytes written with one
`write_packet` call. Interned ids (event names, categories, debug annotation names)
are global and stable for the life of the process; a sequence only tracks which ones it has
already emitted since its incremental state was last cleared, and re-emits them lazily
after a clear.

The module is compiled with Cython's pure-Python mode (`_track_event_writer.pxd`) and runs as
is where it was not built.
"""

from __future__ import annotations

import struct
import threading
import time
from collections.abc import Callable
from typing import Protocol

try:
    import cython
except ImportError:  # installed without Cython: runs as pure Python
    from protozero import _cython_shim as cython

if cython.compiled:
    from cython.cimports.cpython.bytes import PyBytes_AS_STRING, PyBytes_FromStringAndSize
    from cython.cimports.cpython.long import PyLong_AsLongLongAndOverflow
    from cython.cimports.libc.string import memcpy
else:  # compiled, _track_event_writer.pxd cimports the compiled build's from _chunk_packets
    from perfetto_client._chunk_packets_pure import ChunkPackets

__all__ = [
    "CLOCK_ID_INCREMENTAL",
    "EventKeys",
    "PacketSink",
    "ThreadTimeWriter",
    "TrackEventWriter",
    "event_keys",
    "intern_debug_annotation_name",
    "load_encoders",
    "source_location_entry",
    "varint",
]

CLOCK_ID_INCREMENTAL = 64
"""The sequence-scoped clock of delta-encoded timestamps (upstream's kClockIdIncremental)."""

SEQ_INCREMENTAL_STATE_CLEARED = 1
SEQ_NEEDS_INCREMENTAL_STATE = 2

TYPE_SLICE_BEGIN = 1
TYPE_SLICE_END = 2
TYPE_INSTANT = 3
TYPE_COUNTER = 4

_TS = b"\x40"  # TracePacket.timestamp (8, varint)
_TRACK_EVENT = b"\x5a"  # TracePacket.track_event (11, bytes)
_INTERNED_DATA = b"\x62"  # TracePacket.interned_data (12, bytes)
_NEEDS_STATE = b"\x68\x02"  # TracePacket.sequence_flags = SEQ_NEEDS_INCREMENTAL_STATE
_TS_CLOCK_ID = b"\xd0\x03"  # TracePacket.timestamp_clock_id (58, varint)
_CATEGORY_IID = b"\x18"  # TrackEvent.category_iids (3)
_CATEGORY_NAME = b"\xb2\x01"  # TrackEvent.categories (22)
_NAME_IID = b"\x50"  # TrackEvent.name_iid (10)
_NAME = b"\xba\x01"  # TrackEvent.name (23)
_TYPE = b"\x48"  # TrackEvent.type (9)
_TRACK_UUID = b"\x58"  # TrackEvent.track_uuid (11)
_COUNTER_VALUE = b"\xf0\x01"  # TrackEvent.counter_value (30, varint)
_DOUBLE_COUNTER_VALUE = b"\xe1\x02"  # TrackEvent.double_counter_value (44, fixed64)
_FLOW_ID = b"\xf9\x02"  # TrackEvent.flow_ids (47, fixed64)
_TERMINATING_FLOW_ID = b"\x81\x03"  # TrackEvent.terminating_flow_ids (48, fixed64)
_EXTRA_COUNTER_VALUE = b"\x60"  # TrackEvent.extra_counter_values (12, varint)
_END_EVENT = _TYPE + bytes((TYPE_SLICE_END,))
_TYPE_FIELDS = tuple(_TYPE + bytes((t,)) for t in range(8))
_COUNTER_TYPE = _TYPE_FIELDS[TYPE_COUNTER]
_END_TAIL = _TRACK_EVENT + bytes((len(_END_EVENT),)) + _END_EVENT + _NEEDS_STATE
_INTERNED_CATEGORY = b"\x0a"  # InternedData.event_categories (1)
_INTERNED_NAME = b"\x12"  # InternedData.event_names (2)
_INTERNED_ANNOTATION_NAME = b"\x1a"  # InternedData.debug_annotation_names (3)
_INTERNED_SOURCE_LOCATION = b"\x22"  # InternedData.source_locations (4)
_INTERNED_LOG_BODY = b"\xa2\x01"  # InternedData.log_message_body (20)
_LOG_MESSAGE = b"\xaa\x01"  # TrackEvent.log_message (21)
_CLOCK_SNAPSHOT = b"\x32"  # TracePacket.clock_snapshot (6)
_SEQUENCE_FLAGS = b"\x68"  # TracePacket.sequence_flags (13)
_TRACE_PACKET_DEFAULTS = b"\xda\x03"  # TracePacket.trace_packet_defaults (59)
_TRACK_DESCRIPTOR = b"\xe2\x03"  # TracePacket.track_descriptor (60)
_TRACK_EVENT_DEFAULTS = b"\x5a"  # TracePacketDefaults.track_event_defaults (11)
_EXTRA_COUNTER_TRACK_UUID = b"\xf8\x01"  # TrackEventDefaults.extra_counter_track_uuids (31)
_CLOCK = b"\x0a"  # ClockSnapshot.clocks (1)
_CLOCK_ID = b"\x08"  # ClockSnapshot.Clock.clock_id (1)
_CLOCK_TIMESTAMP = b"\x10"  # ClockSnapshot.Clock.timestamp (2)
_CLOCK_INCREMENTAL = b"\x18\x01"  # ClockSnapshot.Clock.is_incremental (3) = true
_CLOCK_UNIT_NS = b"\x20\x01"  # ClockSnapshot.Clock.unit_multiplier_ns (4) = 1
_CLOCK_INCREMENTAL_NS = _CLOCK_INCREMENTAL + _CLOCK_UNIT_NS
_UUID = b"\x08"  # TrackDescriptor.uuid (1)
_PROCESS = b"\x1a"  # TrackDescriptor.process (3)
_THREAD = b"\x22"  # TrackDescriptor.thread (4)
_PARENT_UUID = b"\x28"  # TrackDescriptor.parent_uuid (5)
_PID = b"\x08"  # ProcessDescriptor.pid / ThreadDescriptor.pid (1)
_CMDLINE = b"\x12"  # ProcessDescriptor.cmdline (2)
_PROCESS_NAME = b"\x32"  # ProcessDescriptor.process_name (6)
_TID = b"\x10"  # ThreadDescriptor.tid (2)
_THREAD_NAME = b"\x2a"  # ThreadDescriptor.thread_name (5)
_TRACK_NAME = b"\x12"  # TrackDescriptor.name (2)
_COUNTER = b"\x42"  # TrackDescriptor.counter (8)
_COUNTER_TYPE_FIELD = b"\x08"  # CounterDescriptor.type (1)
_COUNTER_UNIT = b"\x18"  # CounterDescriptor.unit (3)
_COUNTER_UNIT_MULTIPLIER = b"\x20"  # CounterDescriptor.unit_multiplier (4)
_COUNTER_IS_INCREMENTAL = b"\x28\x01"  # CounterDescriptor.is_incremental (5) = true
_COUNTER_UNIT_NAME = b"\x32"  # CounterDescriptor.unit_name (6)
_ENTRY_IID = b"\x08"  # EventName.iid (1), as in EventCategory and DebugAnnotationName
_ENTRY_NAME = b"\x12"  # EventName.name (2), as in EventCategory and DebugAnnotationName
_LOCATION_IID = b"\x08"  # SourceLocation.iid (1)
_LOCATION_FILE = b"\x12"  # SourceLocation.file_name (2)
_LOCATION_FUNCTION = b"\x1a"  # SourceLocation.function_name (3)
_LOCATION_LINE = b"\x20"  # SourceLocation.line_number (4)
_LOG_LOCATION_IID = b"\x08"  # LogMessage.source_location_iid (1)
_LOG_BODY_IID = b"\x10"  # LogMessage.body_iid (2)
_LOG_PRIO = b"\x18"  # LogMessage.prio (3)
_MAX_LOG_BODIES = 1024
"""Log message bodies a sequence remembers (and reuses the iids of) at most."""
_MAX_CACHED_TAILS = 50_000
"""Event keys (those below it) whose events on the thread's track a sequence keeps encoded."""

_U64 = 0xFFFF_FFFF_FFFF_FFFF
_I64_MIN = -(1 << 63)
_I64_MAX = (1 << 63) - 1
_pack_double = struct.Struct("<d").pack

# protozero's varint tables, bound by load_encoders() when tracing is initialized (importing
# protozero costs more than the rest of `import perfetto_client`).
SHORT_VARINTS: tuple[bytes, ...] = ()
VARINT_PAIRS: tuple[bytes, ...] = ()


def _encode_varint_unloaded(value: int) -> bytes:
    load_encoders()
    return encode_varint(value)


encode_varint: Callable[[int], bytes] = _encode_varint_unloaded


def load_encoders() -> None:
    """Binds protozero's varint encoders (before any event is encoded)."""
    global SHORT_VARINTS, VARINT_PAIRS, encode_varint  # noqa: PLW0603 - deferred import
    # protozero: 11 ms of CPU that `import perfetto_client` does not pay.
    from protozero import _proto_utils

    SHORT_VARINTS = _proto_utils.SHORT_VARINTS
    VARINT_PAIRS = _proto_utils.VARINT_PAIRS
    encode_varint = _proto_utils.encode_varint


def varint(value: int) -> bytes:
    """The varint encoding of a non-negative `value` (table lookups below 2**28)."""
    if value < 16384:
        return SHORT_VARINTS[value]
    if value < 268435456:
        return VARINT_PAIRS[value & 0x3FFF] + SHORT_VARINTS[value >> 14]
    return encode_varint(value)


def _concat3(a: bytes, b: bytes, c: bytes) -> bytes:
    """`a + b + c`."""
    if cython.compiled:
        size_a = len(a)
        size_b = len(b)
        out: bytes = PyBytes_FromStringAndSize(cython.NULL, size_a + size_b + len(c))
        p = PyBytes_AS_STRING(out)
        memcpy(p, PyBytes_AS_STRING(a), size_a)
        memcpy(p + size_a, PyBytes_AS_STRING(b), size_b)
        memcpy(p + size_a + size_b, PyBytes_AS_STRING(c), len(c))
        return out
    return a + b + c


def _join(pieces: tuple[bytes, ...]) -> bytes:
    """`b"".join(pieces)`."""
    if cython.compiled:
        total = 0
        for piece in pieces:
            total += len(piece)
        out: bytes = PyBytes_FromStringAndSize(cython.NULL, total)
        p = PyBytes_AS_STRING(out)
        for piece in pieces:
            memcpy(p, PyBytes_AS_STRING(piece), len(piece))
            p += len(piece)
        return out
    return b"".join(pieces)


def _field_bytes(tag: bytes, data: bytes) -> bytes:
    size = len(data)
    if size < 16384:
        return tag + SHORT_VARINTS[size] + data
    return tag + varint(size) + data


def _interned_entry(tag: bytes, iid: int, name: str) -> bytes:
    encoded = name.encode("utf-8", "surrogatepass")
    body = _ENTRY_IID + varint(iid) + _field_bytes(_ENTRY_NAME, encoded)
    return _field_bytes(tag, body)


def event_name_entry(iid: int, name: str) -> bytes:
    """The encoded InternedData.event_names field of one EventName."""
    if not SHORT_VARINTS:
        load_encoders()
    return _interned_entry(_INTERNED_NAME, iid, name)


def source_location_entry(iid: int, file: str, function: str, line: int) -> bytes:
    """The encoded InternedData.source_locations field of one SourceLocation."""
    if not SHORT_VARINTS:  # perfetto-trace interns locations without initializing tracing
        load_encoders()
    body = (
        _LOCATION_IID
        + varint(iid)
        + _field_bytes(_LOCATION_FILE, file.encode("utf-8", "surrogatepass"))
        + _field_bytes(_LOCATION_FUNCTION, function.encode("utf-8", "surrogatepass"))
        + _LOCATION_LINE
        + varint(line)
    )
    return _field_bytes(_INTERNED_SOURCE_LOCATION, body)


class EventKeys:
    """Global interning: event names, categories and (category, name) event keys.

    An event key is the small int a hot caller keeps (e.g. per decorated function) and passes
    to `TrackEventWriter.slice_begin`; it stands for one category (or none) and one name.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.names: dict[str, int] = {}
        self.name_list: list[str] = [""]
        self.categories: dict[str, int] = {}
        self.category_list: list[str] = [""]
        self._keys: dict[tuple[str | None, bool, str], int] = {}
        self.key_list: list[tuple[str | None, bool, str]] = [(None, False, "")]
        self._locations: dict[tuple[str, str, int], int] = {}
        self.location_entries: list[bytes] = [b""]
        """Each source location's encoded InternedData entry, by iid."""

    def reset_locks_after_fork(self) -> None:
        """In a forked child: locks another parent thread held would never be released."""
        global _annotation_lock  # noqa: PLW0603 - a forked child gets a fresh lock
        self._lock = threading.Lock()
        _annotation_lock = threading.Lock()

    def name_iid(self, name: str) -> int:
        """The interning id of an event name (1, 2, ...)."""
        iid = self.names.get(name)
        if iid is None:
            with self._lock:
                iid = self.names.get(name)
                if iid is None:
                    iid = len(self.name_list)
                    self.name_list.append(name)
                    self.names[name] = iid
        return iid

    def category_iid(self, name: str) -> int:
        """The interning id of a (static) category name."""
        iid = self.categories.get(name)
        if iid is None:
            with self._lock:
                iid = self.categories.get(name)
                if iid is None:
                    iid = len(self.category_list)
                    self.category_list.append(name)
                    self.categories[name] = iid
        return iid

    def source_location_iid(self, file: str, function: str, line: int) -> int:
        """The interning id of a source location (a log record's file, function and line)."""
        location = (file, function, line)
        iid = self._locations.get(location)
        if iid is None:
            with self._lock:
                iid = self._locations.get(location)
                if iid is None:
                    iid = len(self.location_entries)
                    self.location_entries.append(source_location_entry(iid, *location))
                    self._locations[location] = iid
        return iid

    def key(self, category: str | None, name: str, *, dynamic_category: bool = False) -> int:
        """The event key of `name` in `category` (None: no category).

        A dynamic category is written by name on each event rather than interned.
        """
        item = (category, dynamic_category, name)
        key = self._keys.get(item)
        if key is None:
            self.name_iid(name)
            if category is not None and not dynamic_category:
                self.category_iid(category)
            with self._lock:
                key = self._keys.get(item)
                if key is None:
                    key = len(self.key_list)
                    self.key_list.append(item)
                    self._keys[item] = key
        return key


event_keys = EventKeys()
"""The process-wide interning tables."""

_annotation_names: dict[str, int] = {}
_annotation_name_list: list[str] = [""]
_annotation_lock = threading.Lock()


def intern_debug_annotation_name(name: str) -> int:
    """The interning id of a debug annotation name."""
    iid = _annotation_names.get(name)
    if iid is None:
        with _annotation_lock:
            iid = _annotation_names.get(name)
            if iid is None:
                iid = len(_annotation_name_list)
                _annotation_name_list.append(name)
                _annotation_names[name] = iid
    return iid


class PacketSink(Protocol):
    """Where a sequence's packets go: a perfetto_smb.TraceWriter, or a startup buffer."""

    def write_packet(self, data: bytes) -> None:
        """Writes one whole encoded packet."""

    def close(self) -> None:
        """Flushes and releases the writer."""


class TrackEventWriter:
    """The track event state of one thread in one tracing session: a sequence.

    Owns the thread's TraceWriter for that session (compiled, its events are encoded
    straight into the TraceWriter's chunk where they fit), its incremental state (last timestamp,
    which interned entries and track descriptors were emitted) and the cached encodings of
    the events it wrote. Use it only from its thread.

    Fast internal API (used by the tracer of `perfetto-trace`):
    `key = event_keys.key(category_name, function_name)` once, then
    `writer.slice_begin(key, ts)` / `writer.slice_end(ts)` / `writer.instant(key, ts)` with
    `ts = writer.now()`; each writes one packet on the thread's track.
    """

    def __init__(
        self,
        sink: PacketSink,
        *,
        clock: Callable[[], int],
        clock_id: int,
        thread_track_uuid: int,
        reset_packets: Callable[[TrackEventWriter, int], list[bytes]],
    ) -> None:
        self._chunk = ChunkPackets(_NEEDS_STATE)
        self.rebind(sink)
        self.now = clock
        """Reads the session's trace clock (ns)."""
        self.clock_id = clock_id
        self.thread_track_uuid = thread_track_uuid
        self._reset_packets = reset_packets
        self.last_ts = 0
        self.cleared = True
        """True when the incremental state must be re-emitted before the next event."""
        self.closed = False
        self._begin_tails: list[bytes | None] = []
        self._instant_tails: list[bytes | None] = []
        """The encoded slice begin (instant) of each event key on the thread's track, by key:
        the packet after its timestamp (None: not encoded since the last clear)."""
        self._heads: dict[int, bytes] = {}
        self._emitted_names: set[int] = set()
        self._emitted_categories: set[int] = set()
        self._emitted_annotation_names: set[int] = set()
        self._annotation_prefixes: dict[tuple[str, ...], tuple[bytes, ...]] = {}
        """Args' names (all emitted on this sequence) -> their encoded name_iid fields."""
        self._emitted_locations: set[int] = set()
        self._log_bodies: dict[str, int] = {}
        self._last_log_body_iid = 0
        self.seen_tracks: set[int] = set()
        self.counter_track: object = None
        """The track of the last counter point, its uuid in `seen_tracks` (None: none since
        the last clear)."""
        self.thread_name = ""

    # Incremental state --------------------------------------------------------------------

    def clear_incremental_state(self) -> None:
        """Marks the incremental state as lost: it is re-emitted before the next event.

        Safe from any thread (one attribute store); the owner thread acts on it.
        """
        self.cleared = True

    def _reset(self, ts: int) -> None:
        self.cleared = False
        self._begin_tails.clear()
        self._instant_tails.clear()
        self._heads.clear()
        self._emitted_names.clear()
        self._emitted_categories.clear()
        self._emitted_annotation_names.clear()
        self._annotation_prefixes.clear()
        self._emitted_locations.clear()
        self._log_bodies.clear()
        self._last_log_body_iid = 0
        self.seen_tracks.clear()
        self.counter_track = None
        self.last_ts = ts
        for packet in self._reset_packets(self, ts):
            self._write(packet)

    def interned_for(
        self,
        category_iid: int,
        name_iid: int,
        annotation_iids: list[int] | None = None,
    ) -> bytes:
        """Encoded InternedData entries this sequence has not emitted yet (marked emitted)."""
        out = b""
        if category_iid and category_iid not in self._emitted_categories:
            self._emitted_categories.add(category_iid)
            out += _interned_entry(
                _INTERNED_CATEGORY, category_iid, event_keys.category_list[category_iid]
            )
        if name_iid and name_iid not in self._emitted_names:
            self._emitted_names.add(name_iid)
            out += _interned_entry(_INTERNED_NAME, name_iid, event_keys.name_list[name_iid])
        if annotation_iids:
            emitted = self._emitted_annotation_names
            for iid in annotation_iids:
                if iid not in emitted:
                    emitted.add(iid)
                    out += _interned_entry(
                        _INTERNED_ANNOTATION_NAME, iid, _annotation_name_list[iid]
                    )
        return out

    def _timestamp(self, ts: int) -> bytes:
        """The timestamp fields of a packet at `ts`, moving the sequence's clock forward.

        A timestamp before the sequence's last one is written absolute, on the trace clock.
        """
        delta = ts - self.last_ts
        if delta >= 0:
            self.last_ts = ts
            return _TS + varint(delta)
        return _TS + varint(ts) + _TS_CLOCK_ID + varint(self.clock_id)

    def _event_head(self, key: int, event_type: int) -> tuple[bytes, bytes]:
        """(InternedData body to emit, TrackEvent fields naming `key`'s category and name)."""
        category, dynamic, name = event_keys.key_list[key]
        name_iid = event_keys.names[name]
        fields = _TYPE + bytes((event_type,))
        category_iid = 0
        if category is not None and event_type != TYPE_SLICE_END:
            if dynamic:
                fields += _field_bytes(_CATEGORY_NAME, category.encode())
            else:
                category_iid = event_keys.categories[category]
                fields += _CATEGORY_IID + varint(category_iid)
        fields += _NAME_IID + varint(name_iid)
        return self.interned_for(category_iid, name_iid), fields

    # Events -------------------------------------------------------------------------------

    def slice_begin(self, key: int, ts: int) -> None:
        """Begins a slice named by event key `key` on the thread's track at `ts` (trace ns)."""
        self._thread_event(self._begin_tails, key, TYPE_SLICE_BEGIN, ts)

    def instant(self, key: int, ts: int) -> None:
        """Writes an instant event named by event key `key` on the thread's track at `ts`."""
        self._thread_event(self._instant_tails, key, TYPE_INSTANT, ts)

    def _thread_event(self, tails: list[bytes | None], key: int, event_type: int, ts: int) -> None:
        """Writes an event of `key` and `event_type` with no other field on the thread's track
        (`tails`: the cached encodings of that type's events)."""
        if self.cleared:
            self._reset(ts)
        tail = tails[key] if key < len(tails) else None
        if tail is None:
            tail = self._new_tail(tails, key, event_type, ts)
            if not tail:
                return
        chunk = self._chunk
        if chunk.bound and chunk.put(ts - self.last_ts, b"", tail, b"", b"", b"", False):
            self.last_ts = ts
            return
        delta = ts - self.last_ts
        if 0 <= delta < 16384:
            self.last_ts = ts
            if cython.compiled:
                self._write(_concat3(_TS, SHORT_VARINTS[delta], tail))
            else:
                self._write(_TS + SHORT_VARINTS[delta] + tail)
        else:
            self._write(self._timestamp(ts) + tail)

    def _new_tail(self, tails: list[bytes | None], key: int, event_type: int, ts: int) -> bytes:
        """Caches the encoding of `key`'s event of `event_type` on the thread's track in
        `tails`; writes it (and returns b"") if it needs interned data first."""
        interned, fields = self._event_head(key, event_type)
        tail = _field_bytes(_TRACK_EVENT, fields) + _NEEDS_STATE
        if key < _MAX_CACHED_TAILS:
            if key >= len(tails):
                tails.extend([None] * (key + 1 - len(tails)))
            tails[key] = tail
        if interned:
            self._write(self._timestamp(ts) + _field_bytes(_INTERNED_DATA, interned) + tail)
            return b""
        return tail

    def slice_end(self, ts: int) -> None:
        """Ends the innermost open slice on the thread's track at `ts`."""
        if self.cleared:
            self._reset(ts)
        chunk = self._chunk
        if chunk.bound and chunk.put(ts - self.last_ts, b"", _END_TAIL, b"", b"", b"", False):
            self.last_ts = ts
            return
        delta = ts - self.last_ts
        if 0 <= delta < 16384:
            self.last_ts = ts
            if cython.compiled:
                self._write(_concat3(_TS, SHORT_VARINTS[delta], _END_TAIL))
            else:
                self._write(_TS + SHORT_VARINTS[delta] + _END_TAIL)
        else:
            self._write(self._timestamp(ts) + _END_TAIL)

    def event(
        self,
        key: int,
        event_type: int,
        ts: int,
        extra_fields: bytes,
        interned: bytes,
    ) -> None:
        """Writes one event of `key` with already encoded TrackEvent fields (any track/args).

        `interned` is InternedData body the caller obtained with `interned_for`.
        """
        if self.cleared:
            # The packet below still carries the caller's interned entries: valid after the clear.
            self._reset(ts)
        head_key = key << 3 | event_type
        fields = self._heads.get(head_key)
        if fields is None:
            if key:
                more, fields = self._event_head(key, event_type)
                interned += more
            else:
                fields = _TYPE_FIELDS[event_type]
            self._heads[head_key] = fields
        self._write_event(ts, interned, fields, extra_fields, b"", b"")

    def counter(self, track_field: bytes, value: float, ts: int) -> None:
        """Writes a point `value` at `ts` on the counter track whose TrackEvent.track_uuid
        field is `track_field` (described already): an int as counter_value, else a double."""
        if self.cleared:
            self._reset(ts)
        if type(value) is int:
            overflow = 0
            if cython.compiled:
                number = PyLong_AsLongLongAndOverflow(value, cython.address(overflow))
            elif _I64_MIN <= value <= _I64_MAX:
                number = value
            else:
                overflow = 1
            if not overflow and self._chunk.put_counter(
                ts - self.last_ts, _COUNTER_TYPE, track_field, _COUNTER_VALUE, number
            ):
                self.last_ts = ts
                return
            if 0 <= value < 16384:
                self._write_event(
                    ts, b"", _COUNTER_TYPE, track_field, _COUNTER_VALUE, SHORT_VARINTS[value]
                )
                return
        self._write_event(ts, b"", _COUNTER_TYPE, track_field, counter_value_field(value), b"")

    def _write_event(  # noqa: PLR0917 - positional: the hot paths call it
        self, ts: int, interned: bytes, fields: bytes, extra: bytes, extra2: bytes, extra3: bytes
    ) -> None:
        """Writes a packet at `ts` holding InternedData body `interned` and a TrackEvent of
        encoded `fields` followed by `extra`, `extra2` and `extra3`."""
        chunk = self._chunk
        if chunk.bound and chunk.put(
            ts - self.last_ts, interned, fields, extra, extra2, extra3, True
        ):
            self.last_ts = ts
            return
        size = len(fields) + len(extra) + len(extra2) + len(extra3)
        delta = ts - self.last_ts
        if 0 <= delta < 16384:
            self.last_ts = ts
            stamp = _TS
            stamp_value = SHORT_VARINTS[delta]
        else:
            stamp = self._timestamp(ts)
            stamp_value = b""
        pieces = (
            stamp,
            stamp_value,
            _field_bytes(_INTERNED_DATA, interned) if interned else b"",
            _TRACK_EVENT,
            SHORT_VARINTS[size] if size < 16384 else varint(size),
            fields,
            extra,
            extra2,
            extra3,
            _NEEDS_STATE,
        )
        self._write(_join(pieces))

    def log_message(self, key: int, ts: int, location_iid: int, body: str, priority: int) -> None:
        """Writes an instant of `key` on the thread's track carrying a LogMessage: the
        interned `body`, source location `location_iid` and LogMessage.Priority `priority`.

        Bodies are interned per sequence; the last `_MAX_LOG_BODIES` distinct ones are
        remembered, a body seen again among them reuses its iid.
        """
        if self.cleared:
            self._reset(ts)
        interned = b""
        if location_iid not in self._emitted_locations:
            self._emitted_locations.add(location_iid)
            interned = event_keys.location_entries[location_iid]
        bodies = self._log_bodies
        body_iid = bodies.get(body)
        if body_iid is None:
            if len(bodies) >= _MAX_LOG_BODIES:
                bodies.clear()  # the iids go on increasing: none is ever redefined
            self._last_log_body_iid += 1
            body_iid = bodies[body] = self._last_log_body_iid
            interned += _interned_entry(_INTERNED_LOG_BODY, body_iid, body)
        message = _LOG_LOCATION_IID + varint(location_iid) + _LOG_BODY_IID + varint(body_iid)
        message += _LOG_PRIO
        message += SHORT_VARINTS[priority]
        self.event(
            key, TYPE_INSTANT, ts, _LOG_MESSAGE + SHORT_VARINTS[len(message)] + message, interned
        )

    def ensure_state(self, ts: int) -> None:
        """Re-emits the incremental state if it was cleared (before computing interned data)."""
        if self.cleared:
            self._reset(ts)

    def ensure_track(self, uuid: int, descriptor: Callable[[], bytes], ts: int) -> None:
        """Emits a track's descriptor packet if this sequence has not described it yet."""
        if self.cleared:
            self._reset(ts)
        if uuid not in self.seen_tracks:
            self.seen_tracks.add(uuid)
            self._write(descriptor())

    def write_raw(self, fields: bytes) -> None:
        """Writes a packet made of already encoded TracePacket fields."""
        self._write(fields)

    def rebind(self, sink: PacketSink) -> None:
        """Writes the sequence's packets into `sink` from now on (startup tracing adoption:
        the same sequence continues into a session's TraceWriter)."""
        self._sink = sink
        write: Callable[[bytes], None] = sink.write_packet
        self._write = write
        self._chunk.bind(sink)

    def close(self) -> None:
        """Flushes and closes the underlying TraceWriter; later events are dropped."""
        if not self.closed:
            self.closed = True
            self._write = _drop
            self._chunk.unbind()
            self._sink.close()


class ThreadTimeWriter(TrackEventWriter):
    """A sequence whose events on the thread's track carry the thread's CPU time.

    As upstream's SDK with `enable_thread_time_sampling`: each such event adds one
    `extra_counter_values` entry, the CPU time (ns) since the previous sample, for the
    incremental thread-time counter track that the sequence's TrackEventDefaults name in
    `extra_counter_track_uuids`. With `subsampling_ns`, events closer than that to the last
    sample carry 0.
    """

    def __init__(
        self,
        sink: PacketSink,
        *,
        clock: Callable[[], int],
        clock_id: int,
        thread_track_uuid: int,
        reset_packets: Callable[[TrackEventWriter, int], list[bytes]],
        subsampling_ns: int = 0,
    ) -> None:
        super().__init__(
            sink,
            clock=clock,
            clock_id=clock_id,
            thread_track_uuid=thread_track_uuid,
            reset_packets=reset_packets,
        )
        self.subsampling_ns = subsampling_ns
        self.last_thread_time = 0
        self.last_sample_ts = 0

    def _reset(self, ts: int) -> None:
        self.last_thread_time = 0
        self.last_sample_ts = 0
        super()._reset(ts)

    def _sample(self, ts: int) -> bytes:
        """The extra_counter_values field of an event at `ts` on the thread's track."""
        if (
            self.subsampling_ns
            and self.last_sample_ts
            and ts < self.last_sample_ts + self.subsampling_ns
        ):
            return _EXTRA_COUNTER_VALUE + b"\x00"
        now = time.thread_time_ns()
        delta = now - self.last_thread_time
        self.last_thread_time = now
        self.last_sample_ts = ts
        return _EXTRA_COUNTER_VALUE + varint(delta)

    def slice_begin(self, key: int, ts: int) -> None:
        """Begins a slice on the thread's track, with a thread time sample."""
        self.event(key, TYPE_SLICE_BEGIN, ts, b"", b"")

    def slice_end(self, ts: int) -> None:
        """Ends the innermost slice on the thread's track, with a thread time sample."""
        self.event(0, TYPE_SLICE_END, ts, b"", b"")

    def instant(self, key: int, ts: int) -> None:
        """Writes an instant on the thread's track, with a thread time sample."""
        self.event(key, TYPE_INSTANT, ts, b"", b"")

    def event(
        self,
        key: int,
        event_type: int,
        ts: int,
        extra_fields: bytes,
        interned: bytes,
    ) -> None:
        """Writes one event; one on the thread's track (`extra_fields` naming no track)
        carries a thread time sample."""
        if self.cleared:
            self._reset(ts)
        if not extra_fields.startswith(_TRACK_UUID):
            extra_fields = self._sample(ts) + extra_fields
        super().event(key, event_type, ts, extra_fields, interned)


def _drop(_packet: bytes) -> None:
    """The writer of a closed sequence."""


def clock_snapshot_packet(
    ts: int, clock_id: int, track_uuid: int, extra_counter_track_uuid: int = 0
) -> bytes:
    """The packet that opens a sequence's incremental state at `ts` (on clock `clock_id`).

    It clears the incremental state, sets TracePacketDefaults (the sequence-scoped clock,
    the thread's track and the thread time counter track, if any) and ties the sequence
    clock to `clock_id` with a ClockSnapshot.
    """
    sequence_clock = _CLOCK_ID + varint(clock_id) + _CLOCK_TIMESTAMP + varint(ts)
    incremental_clock = (
        _CLOCK_ID + varint(CLOCK_ID_INCREMENTAL) + _CLOCK_TIMESTAMP + varint(ts)
    ) + _CLOCK_INCREMENTAL_NS
    clocks = _field_bytes(_CLOCK, sequence_clock) + _field_bytes(_CLOCK, incremental_clock)
    track_event_defaults = _TRACK_UUID + varint(track_uuid)
    if extra_counter_track_uuid:
        track_event_defaults += _EXTRA_COUNTER_TRACK_UUID + varint(extra_counter_track_uuid)
    defaults = (
        _field_bytes(_TRACK_EVENT_DEFAULTS, track_event_defaults)
        + _TS_CLOCK_ID
        + varint(CLOCK_ID_INCREMENTAL)
    )
    return (
        _field_bytes(_CLOCK_SNAPSHOT, clocks)
        + _TS
        + varint(ts)
        + _SEQUENCE_FLAGS
        + varint(SEQ_INCREMENTAL_STATE_CLEARED)
        + _TS_CLOCK_ID
        + varint(clock_id)
        + _field_bytes(_TRACE_PACKET_DEFAULTS, defaults)
    )


def process_descriptor_packet(uuid: int, pid: int, name: str, cmdline: list[str]) -> bytes:
    """The TracePacket with the TrackDescriptor of a process's track."""
    if not SHORT_VARINTS:  # a track may be described before tracing starts
        load_encoders()
    process = _PID + varint(pid)
    for arg in cmdline:
        process += _field_bytes(_CMDLINE, arg.encode("utf-8", "surrogatepass"))
    process += _field_bytes(_PROCESS_NAME, name.encode("utf-8", "surrogatepass"))
    track = _UUID + varint(uuid) + _field_bytes(_PROCESS, process)
    return _field_bytes(_TRACK_DESCRIPTOR, track)


def thread_descriptor_packet(uuid: int, parent_uuid: int, pid: int, tid: int, name: str) -> bytes:
    """The TracePacket with the TrackDescriptor of a thread's track (unnamed if `name` is "")."""
    if not SHORT_VARINTS:  # a track may be described before tracing starts
        load_encoders()
    thread = _PID + varint(pid) + _TID + varint(tid)
    if name:
        thread += _field_bytes(_THREAD_NAME, name.encode("utf-8", "surrogatepass"))
    track = (
        _UUID + varint(uuid) + _field_bytes(_THREAD, thread) + _PARENT_UUID + varint(parent_uuid)
    )
    return _field_bytes(_TRACK_DESCRIPTOR, track)


def track_descriptor_packet(
    uuid: int, parent_uuid: int, name: str | None = None, counter: bytes | None = None
) -> bytes:
    """The TracePacket with the TrackDescriptor of a custom track: its uuid, its parent's (0:
    none), its name (None: unnamed) and its encoded CounterDescriptor (None: not a counter)."""
    if not SHORT_VARINTS:  # a track may be described before tracing starts
        load_encoders()
    track = _UUID + varint(uuid)
    if name is not None:
        track += _field_bytes(_TRACK_NAME, name.encode("utf-8", "surrogatepass"))
    if parent_uuid:
        track += _PARENT_UUID + varint(parent_uuid)
    if counter is not None:
        track += _field_bytes(_COUNTER, counter)
    return _field_bytes(_TRACK_DESCRIPTOR, track)


def counter_descriptor(
    counter_type: int, unit: int, unit_name: str, unit_multiplier: int, is_incremental: bool
) -> bytes:
    """An encoded CounterDescriptor (fields at their defaults left out)."""
    if not SHORT_VARINTS:
        load_encoders()
    out = _COUNTER_TYPE_FIELD + varint(counter_type) if counter_type else b""
    if unit:
        out += _COUNTER_UNIT + varint(unit)
    if unit_multiplier != 1:
        out += _COUNTER_UNIT_MULTIPLIER + varint(unit_multiplier & _U64)
    if is_incremental:
        out += _COUNTER_IS_INCREMENTAL
    if unit_name:
        out += _field_bytes(_COUNTER_UNIT_NAME, unit_name.encode("utf-8", "surrogatepass"))
    return out


def fixed64(value: int) -> bytes:
    """Little-endian 8 bytes of a 64-bit unsigned value."""
    return (value & _U64).to_bytes(8, "little")


def flow_fields(flow_ids: tuple[int, ...], terminating: tuple[int, ...]) -> bytes:
    """TrackEvent flow_ids / terminating_flow_ids fields."""
    out = b""
    for flow_id in flow_ids:
        out += _FLOW_ID + fixed64(flow_id)
    for flow_id in terminating:
        out += _TERMINATING_FLOW_ID + fixed64(flow_id)
    return out


def track_uuid_field(uuid: int) -> bytes:
    """TrackEvent.track_uuid."""
    return _TRACK_UUID + varint(uuid)


def counter_value_field(value: int | float) -> bytes:
    """TrackEvent.counter_value (int) or double_counter_value (float)."""
    if type(value) is float:
        return _DOUBLE_COUNTER_VALUE + _pack_double(value)
    if isinstance(value, int) and not isinstance(value, bool):
        if 0 <= value < 16384:
            return _COUNTER_VALUE + SHORT_VARINTS[value]
        return _COUNTER_VALUE + varint(value & _U64)
    return _DOUBLE_COUNTER_VALUE + _pack_double(float(value))


def boottime_ns() -> int:
    """CLOCK_BOOTTIME in ns."""
    return time.clock_gettime_ns(time.CLOCK_BOOTTIME)
