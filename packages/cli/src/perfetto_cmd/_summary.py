"""`perfetto --summary TRACE`: a text summary of a trace file, read as a stream.

The file is read in fixed-size chunks and every packet is decoded field by field with
protozero's varint reader, so memory stays bounded by the largest packet and the number of
distinct names, whatever the trace's size. Upstream's schema gives the packet type names.
"""

from __future__ import annotations

import heapq
import struct
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TextIO

from perfetto_protos.tags.fields import (
    ClockSnapshot_Clock_clock_id_ID,
    ClockSnapshot_Clock_is_incremental_ID,
    ClockSnapshot_Clock_timestamp_ID,
    ClockSnapshot_clocks_ID,
    EventName_iid_ID,
    EventName_name_ID,
    InternedData_event_categories_ID,
    InternedData_event_names_ID,
    ProcessDescriptor_cmdline_ID,
    ProcessDescriptor_pid_ID,
    ProcessDescriptor_process_name_ID,
    ProcessTree_Process_cmdline_ID,
    ProcessTree_Process_pid_ID,
    ProcessTree_processes_ID,
    ProcessTree_Thread_name_ID,
    ProcessTree_Thread_tgid_ID,
    ProcessTree_Thread_tid_ID,
    ProcessTree_threads_ID,
    ThreadDescriptor_pid_ID,
    ThreadDescriptor_thread_name_ID,
    ThreadDescriptor_tid_ID,
    TracePacket_clock_snapshot_ID,
    TracePacket_incremental_state_cleared_ID,
    TracePacket_interned_data_ID,
    TracePacket_previous_packet_dropped_ID,
    TracePacket_process_descriptor_ID,
    TracePacket_process_tree_ID,
    TracePacket_sequence_flags_ID,
    TracePacket_SequenceFlags_SEQ_INCREMENTAL_STATE_CLEARED,
    TracePacket_thread_descriptor_ID,
    TracePacket_timestamp_clock_id_ID,
    TracePacket_timestamp_ID,
    TracePacket_trace_packet_defaults_ID,
    TracePacket_trace_stats_ID,
    TracePacket_track_descriptor_ID,
    TracePacket_track_event_ID,
    TracePacket_trusted_packet_sequence_id_ID,
    TracePacketDefaults_track_event_defaults_ID,
    TrackDescriptor_atrace_name_ID,
    TrackDescriptor_name_ID,
    TrackDescriptor_process_ID,
    TrackDescriptor_static_name_ID,
    TrackDescriptor_thread_ID,
    TrackDescriptor_uuid_ID,
    TrackEvent_categories_ID,
    TrackEvent_category_iids_ID,
    TrackEvent_counter_value_ID,
    TrackEvent_double_counter_value_ID,
    TrackEvent_name_ID,
    TrackEvent_name_iid_ID,
    TrackEvent_track_uuid_ID,
    TrackEvent_type_ID,
    TrackEvent_Type_TYPE_COUNTER,
    TrackEvent_Type_TYPE_SLICE_BEGIN,
    TrackEvent_Type_TYPE_SLICE_END,
)
from perfetto_service import (
    TRACE_PACKET_TAG,
    CorruptTraceError,
    TraceFileError,
    read_trace_file,
)
from protozero import read_varint

from perfetto_cmd._errors import CliError

__all__ = ["TraceSummary", "summarize_file"]

CHUNK_SIZE = 8 << 20
ROWS = 20
"""Rows printed per table, the largest first (as `perfetto-trace report --limit`'s default);
the rest are counted in one line."""

# Field numbers, from the generated tags (upstream's; checked against its schema by the tests).
_P_CLOCK_SNAPSHOT = TracePacket_clock_snapshot_ID
_P_TIMESTAMP = TracePacket_timestamp_ID
_P_SEQUENCE_ID = TracePacket_trusted_packet_sequence_id_ID
_P_TRACK_EVENT = TracePacket_track_event_ID
_P_INTERNED_DATA = TracePacket_interned_data_ID
_P_SEQUENCE_FLAGS = TracePacket_sequence_flags_ID
_P_TRACE_STATS = TracePacket_trace_stats_ID
_P_INCREMENTAL_STATE_CLEARED = TracePacket_incremental_state_cleared_ID
_P_PREVIOUS_PACKET_DROPPED = TracePacket_previous_packet_dropped_ID
_P_PROCESS_DESCRIPTOR = TracePacket_process_descriptor_ID
_P_THREAD_DESCRIPTOR = TracePacket_thread_descriptor_ID
_P_TIMESTAMP_CLOCK_ID = TracePacket_timestamp_clock_id_ID
_P_DEFAULTS = TracePacket_trace_packet_defaults_ID
_P_TRACK_DESCRIPTOR = TracePacket_track_descriptor_ID
_SEQ_INCREMENTAL_STATE_CLEARED = TracePacket_SequenceFlags_SEQ_INCREMENTAL_STATE_CLEARED
_TE_CATEGORY_IIDS = TrackEvent_category_iids_ID
_TE_TYPE = TrackEvent_type_ID
_TE_NAME_IID = TrackEvent_name_iid_ID
_TE_TRACK_UUID = TrackEvent_track_uuid_ID
_TE_CATEGORIES = TrackEvent_categories_ID
_TE_NAME = TrackEvent_name_ID
_TE_COUNTER_VALUE = TrackEvent_counter_value_ID
_TE_DOUBLE_COUNTER_VALUE = TrackEvent_double_counter_value_ID
_SLICE_BEGIN = TrackEvent_Type_TYPE_SLICE_BEGIN
_SLICE_END = TrackEvent_Type_TYPE_SLICE_END
_COUNTER = TrackEvent_Type_TYPE_COUNTER
_ID_EVENT_CATEGORIES = InternedData_event_categories_ID
_ID_EVENT_NAMES = InternedData_event_names_ID
_DEFAULTS_TRACK_EVENT = TracePacketDefaults_track_event_defaults_ID
_FIRST_SEQUENCE_SCOPED_CLOCK = 64
_P_PROCESS_TREE = TracePacket_process_tree_ID
_PT_PROCESSES = ProcessTree_processes_ID
_PT_THREADS = ProcessTree_threads_ID
_PT_PROCESS_PID = ProcessTree_Process_pid_ID
_PT_PROCESS_CMDLINE = ProcessTree_Process_cmdline_ID
_PT_THREAD_TID = ProcessTree_Thread_tid_ID
_PT_THREAD_NAME = ProcessTree_Thread_name_ID
_PT_THREAD_TGID = ProcessTree_Thread_tgid_ID

_Fields = dict[int, list[tuple[int, int, int]]]
"""Field id -> [(wire type, value or payload offset, payload size)]."""


def _fields(buf: memoryview, pos: int, end: int) -> _Fields:
    """The fields of the message in buf[pos:end]; `CorruptTraceError` if it is malformed."""
    out: _Fields = {}
    while pos < end:
        tag = buf[pos]
        if tag < 0x80:
            pos += 1
        else:
            tag, pos = read_varint(buf, pos, end)
            if pos < 0:
                raise CorruptTraceError("a tag runs past its end")
        wire_type = tag & 7
        if wire_type == 0:
            value = buf[pos] if pos < end else 0x80
            if value < 0x80:
                pos += 1
            else:
                value, pos = read_varint(buf, pos, end)
                if pos < 0:
                    raise CorruptTraceError("a varint runs past its end")
            item = (0, value, 0)
        elif wire_type == 2:
            size, pos = _length(buf, pos, end, "a field runs past its end")
            item = (2, pos, size)
            pos += size
        elif wire_type == 1:
            item = (1, int.from_bytes(buf[pos : pos + 8], "little"), 0)
            pos = _skip_fixed(pos, 8, end, "a message")
        elif wire_type == 5:
            item = (5, int.from_bytes(buf[pos : pos + 4], "little"), 0)
            pos = _skip_fixed(pos, 4, end, "a message")
        else:
            raise CorruptTraceError("a field of a message runs past its end")
        got = out.get(tag >> 3)
        if got is None:
            out[tag >> 3] = [item]
        else:
            got.append(item)
    return out


def _length(buf: memoryview, pos: int, end: int, error: str) -> tuple[int, int]:
    """(size, payload offset) of the length-delimited field whose size is at `pos`; the
    payload must end by `end`, else `CorruptTraceError(error)`."""
    size = buf[pos] if pos < end else 0x80
    if size < 0x80:
        pos += 1
    else:
        size, pos = read_varint(buf, pos, end)
        if pos < 0:
            raise CorruptTraceError(error)
    if size > end - pos:
        raise CorruptTraceError(error)
    return size, pos


def _skip_field(buf: memoryview, pos: int, end: int, wire_type: int) -> int:
    """Where the varint or fixed-size field of a message whose value is at `pos` ends."""
    if wire_type == 0:
        _, pos = read_varint(buf, pos, end)
        if pos < 0:
            raise CorruptTraceError("a varint runs past its end")
        return pos
    if wire_type == 1:
        return _skip_fixed(pos, 8, end, "a message")
    if wire_type == 5:
        return _skip_fixed(pos, 4, end, "a message")
    raise CorruptTraceError("a field of a message runs past its end")


def _skip_fixed(pos: int, size: int, end: int, where: str) -> int:
    if pos + size > end:
        raise CorruptTraceError(f"a field of {where} runs past its end")
    return pos + size


def _int(fields: _Fields, field_id: int, default: int = 0) -> int:
    got = fields.get(field_id)
    return got[-1][1] if got else default


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _text(buf: memoryview, fields: _Fields, field_id: int) -> str | None:
    got = fields.get(field_id)
    if not got:
        return None
    _, offset, size = got[-1]
    return str(buf[offset : offset + size], "utf-8", "replace")


_unpack_double = struct.Struct("<d").unpack


@dataclass(slots=True)
class _SliceStats:
    count: int = 0
    total_ns: int = 0
    max_ns: int = 0


@dataclass(slots=True)
class _CounterStats:
    count: int = 0
    low: float = float("inf")
    high: float = float("-inf")
    last: float = 0.0


@dataclass
class _Sequence:
    """Per-sequence incremental state: interning tables, defaults, incremental clocks."""

    categories: dict[int, str] = field(default_factory=dict)
    names: dict[int, str] = field(default_factory=dict)
    default_track: int = 0
    default_clock: int = 0
    clocks: dict[int, int] = field(default_factory=dict)

    def reset(self) -> None:
        self.categories.clear()
        self.names.clear()
        self.default_track = 0
        self.default_clock = 0
        self.clocks.clear()


@dataclass
class TraceSummary:
    """What `--summary` reports about one trace."""

    size: int = 0
    packets: int = 0
    packet_types: dict[int, int] = field(default_factory=dict)
    slices: dict[tuple[str, str], _SliceStats] = field(default_factory=dict)
    instants: Counter[tuple[str, str]] = field(default_factory=Counter)
    counters: dict[str, _CounterStats] = field(default_factory=dict)
    processes: dict[int, str] = field(default_factory=dict)
    threads: dict[int, tuple[int, str]] = field(default_factory=dict)
    packets_after_loss: int = 0
    unterminated_slices: int = 0
    trace_stats: bytes | None = None
    truncated_at: int | None = None
    _sequences: dict[int, _Sequence] = field(default_factory=dict)
    _open: dict[tuple[int, int], list[tuple[str, str, int]]] = field(default_factory=dict)
    _track_names: dict[int, str] = field(default_factory=dict)

    def add_packet(self, buf: memoryview, pos: int, end: int) -> None:
        """Accounts for the TracePacket in buf[pos:end] (one inline pass over its fields)."""
        self.packets += 1
        kind = ts = sequence_id = flags = dropped = cleared = 0
        clock = -1
        payload = 0
        payload_size = 0
        interned: list[tuple[int, int, int]] | None = None
        defaults: tuple[int, int, int] | None = None
        metadata = _PACKET_METADATA
        while pos < end:
            tag = buf[pos]
            if tag < 0x80:
                pos += 1
            else:
                tag, pos = read_varint(buf, pos, end)
                if pos < 0:
                    raise CorruptTraceError("a tag runs past its end")
            field_id = tag >> 3
            wire_type = tag & 7
            if wire_type == 0:
                value = buf[pos] if pos < end else 0x80
                if value < 0x80:
                    pos += 1
                else:
                    value, pos = read_varint(buf, pos, end)
                    if pos < 0:
                        raise CorruptTraceError("a varint runs past its end")
                if field_id == _P_TIMESTAMP:
                    ts = value
                elif field_id == _P_SEQUENCE_ID:
                    sequence_id = value
                elif field_id == _P_SEQUENCE_FLAGS:
                    flags = value
                elif field_id == _P_TIMESTAMP_CLOCK_ID:
                    clock = value
                elif field_id == _P_PREVIOUS_PACKET_DROPPED:
                    dropped = value
                elif field_id == _P_INCREMENTAL_STATE_CLEARED:
                    cleared = value
                elif not kind and field_id not in metadata:
                    kind = field_id
            elif wire_type == 2:
                size = buf[pos] if pos < end else 0x80
                if size < 0x80 and size < end - pos:  # the common case, inline
                    pos += 1
                else:
                    size, pos = _length(buf, pos, end, "a field runs past its end")
                if field_id == _P_INTERNED_DATA:
                    if interned is None:
                        interned = []
                    interned.append((2, pos, size))
                elif field_id == _P_DEFAULTS:
                    defaults = (2, pos, size)
                elif not kind and field_id not in metadata:
                    kind = field_id
                    payload = pos
                    payload_size = size
                pos += size
            elif wire_type == 1:
                pos = _skip_fixed(pos, 8, end, "a packet")
                if not kind and field_id not in metadata:
                    kind = field_id
            elif wire_type == 5:
                pos = _skip_fixed(pos, 4, end, "a packet")
                if not kind and field_id not in metadata:
                    kind = field_id
            else:
                raise CorruptTraceError("a field of a packet runs past its end")
        types = self.packet_types
        types[kind] = types.get(kind, 0) + 1
        sequence = self._sequences.get(sequence_id)
        if sequence is None:
            sequence = self._sequences[sequence_id] = _Sequence()
        elif dropped:  # set on every sequence's first packet
            self.packets_after_loss += 1
        if cleared or flags & _SEQ_INCREMENTAL_STATE_CLEARED:
            sequence.reset()
        if defaults is not None:
            self._defaults(buf, defaults, sequence)
        if interned is not None:
            for item in interned:
                self._interned(buf, item, sequence)
        if kind == _P_TRACK_EVENT:
            if clock < 0:
                clock = sequence.default_clock
            clocks = sequence.clocks
            if clock >= _FIRST_SEQUENCE_SCOPED_CLOCK and clock in clocks:
                ts = clocks[clock] = clocks[clock] + ts
            self._track_event(buf, payload, payload + payload_size, ts, sequence_id, sequence)
            return
        handler = _HANDLERS.get(kind)
        if handler is not None:
            handler(self, buf, payload, payload + payload_size, sequence)

    def _defaults(self, buf: memoryview, item: tuple[int, int, int], seq: _Sequence) -> None:
        defaults = _fields(buf, item[1], item[1] + item[2])
        seq.default_clock = _int(defaults, _P_TIMESTAMP_CLOCK_ID)
        event_defaults = defaults.get(_DEFAULTS_TRACK_EVENT)
        if event_defaults:
            _, offset, size = event_defaults[-1]
            seq.default_track = _int(_fields(buf, offset, offset + size), _TE_TRACK_UUID)

    def _interned(self, buf: memoryview, item: tuple[int, int, int], seq: _Sequence) -> None:
        """Adds the event categories and names of an InternedData to the sequence's tables,
        entry by entry (a table of a million names costs one str per name)."""
        pos = item[1]
        end = pos + item[2]
        while pos < end:
            tag = buf[pos]
            if tag < 0x80:
                pos += 1
            else:
                tag, pos = read_varint(buf, pos, end)
                if pos < 0:
                    raise CorruptTraceError("a tag runs past its end")
            wire_type = tag & 7
            if wire_type != 2:
                pos = _skip_field(buf, pos, end, wire_type)
                continue
            size, pos = _length(buf, pos, end, "a field runs past its end")
            field_id = tag >> 3
            if field_id in {_ID_EVENT_NAMES, _ID_EVENT_CATEGORIES}:
                entry = _fields(buf, pos, pos + size)
                table = seq.names if field_id == _ID_EVENT_NAMES else seq.categories
                table[_int(entry, EventName_iid_ID)] = _text(buf, entry, EventName_name_ID) or ""
            pos += size

    def _track_event(  # noqa: PLR0917
        self, buf: memoryview, pos: int, end: int, ts: int, sequence_id: int, seq: _Sequence
    ) -> None:
        event_type = name_iid = 0
        track = seq.default_track
        name: str | None = None
        categories: list[str] | None = None
        category_iids: list[int] | None = None
        counter: float | None = None
        while pos < end:
            tag = buf[pos]
            if tag < 0x80:
                pos += 1
            else:
                tag, pos = read_varint(buf, pos, end)
                if pos < 0:
                    raise CorruptTraceError("a tag of its track_event runs past its end")
            field_id = tag >> 3
            wire_type = tag & 7
            if wire_type == 0:
                value = buf[pos] if pos < end else 0x80
                if value < 0x80:
                    pos += 1
                else:
                    value, pos = read_varint(buf, pos, end)
                    if pos < 0:
                        raise CorruptTraceError("a varint of its track_event runs past its end")
                if field_id == _TE_TYPE:
                    event_type = value
                elif field_id == _TE_TRACK_UUID:
                    track = value
                elif field_id == _TE_NAME_IID:
                    name_iid = value
                elif field_id == _TE_CATEGORY_IIDS:
                    if category_iids is None:
                        category_iids = []
                    category_iids.append(value)
                elif field_id == _TE_COUNTER_VALUE:
                    counter = float(_signed(value))
            elif wire_type == 2:
                size = buf[pos] if pos < end else 0x80
                if size < 0x80 and size < end - pos:  # the common case, inline
                    pos += 1
                else:
                    size, pos = _length(
                        buf,
                        pos,
                        end,
                        "the name of its track_event runs past its end"
                        if field_id == _TE_NAME
                        else "a field of its track_event runs past its end",
                    )
                if field_id == _TE_NAME:
                    name = str(buf[pos : pos + size], "utf-8", "replace")
                elif field_id == _TE_CATEGORIES:
                    if categories is None:
                        categories = []
                    categories.append(str(buf[pos : pos + size], "utf-8", "replace"))
                elif field_id == _TE_CATEGORY_IIDS:  # packed
                    if category_iids is None:
                        category_iids = []
                    at = pos
                    while at < pos + size:
                        value, at = read_varint(buf, at, pos + size)
                        if at < 0:
                            raise CorruptTraceError("a varint of its track_event runs past its end")
                        category_iids.append(value)
                pos += size
            elif wire_type == 1:
                at = pos
                pos = _skip_fixed(pos, 8, end, "its track_event")
                if field_id == _TE_DOUBLE_COUNTER_VALUE:
                    counter = _unpack_double(buf[at:pos])[0]
            elif wire_type == 5:
                pos = _skip_fixed(pos, 4, end, "its track_event")
            else:
                raise CorruptTraceError("a field of its track_event runs past its end")
        if event_type == _COUNTER:
            self._counter_sample(track, 0.0 if counter is None else counter)
            return
        key = (sequence_id, track)
        if event_type == _SLICE_END:
            stack = self._open.get(key)
            if stack:
                category, begin_name, begin = stack.pop()
                stats = self.slices.get((category, begin_name))
                if stats is None:
                    stats = self.slices[category, begin_name] = _SliceStats()
                duration = ts - begin
                stats.count += 1
                stats.total_ns += duration
                stats.max_ns = max(stats.max_ns, duration)
            return
        if name is None:
            name = seq.names.get(name_iid, "?")
        if category_iids is not None:
            if categories is None:
                categories = []
            table = seq.categories
            categories.extend(table.get(iid, "?") for iid in category_iids)
        category = ",".join(categories) if categories else ""
        if event_type == _SLICE_BEGIN:
            stack = self._open.get(key)
            if stack is None:
                stack = self._open[key] = []
            stack.append((category, name, ts))
        else:
            self.instants[category, name] += 1

    def _counter_sample(self, track: int, value: float) -> None:
        name = self._track_names.get(track, f"track {track}")
        stats = self.counters.get(name)
        if stats is None:
            stats = self.counters[name] = _CounterStats()
        stats.count += 1
        stats.low = min(stats.low, value)
        stats.high = max(stats.high, value)
        stats.last = value

    def _track_descriptor(self, buf: memoryview, pos: int, end: int, _seq: _Sequence) -> None:
        track = _fields(buf, pos, end)
        uuid = _int(track, TrackDescriptor_uuid_ID)
        name = (
            _text(buf, track, TrackDescriptor_name_ID)
            or _text(buf, track, TrackDescriptor_static_name_ID)
            or _text(buf, track, TrackDescriptor_atrace_name_ID)
        )
        if name:
            self._track_names[uuid] = name
        for _, o, s in track.get(TrackDescriptor_process_ID, ()):
            self._process_descriptor(buf, o, o + s, _seq)
        for _, o, s in track.get(TrackDescriptor_thread_ID, ()):
            self._thread_descriptor(buf, o, o + s, _seq)

    def _process_descriptor(self, buf: memoryview, pos: int, end: int, _seq: _Sequence) -> None:
        process = _fields(buf, pos, end)
        pid = _int(process, ProcessDescriptor_pid_ID)
        name = _text(buf, process, ProcessDescriptor_process_name_ID) or _text(
            buf, process, ProcessDescriptor_cmdline_ID
        )
        if name or pid not in self.processes:
            self.processes[pid] = name or ""

    def _thread_descriptor(self, buf: memoryview, pos: int, end: int, _seq: _Sequence) -> None:
        thread = _fields(buf, pos, end)
        tid = _int(thread, ThreadDescriptor_tid_ID)
        name = _text(buf, thread, ThreadDescriptor_thread_name_ID)
        if name or tid not in self.threads:
            self.threads[tid] = (_int(thread, ThreadDescriptor_pid_ID), name or "")

    def _process_tree(self, buf: memoryview, pos: int, end: int, _seq: _Sequence) -> None:
        tree = _fields(buf, pos, end)
        for _, o, s in tree.get(_PT_PROCESSES, ()):
            process = _fields(buf, o, o + s)
            pid = _int(process, _PT_PROCESS_PID)
            self.processes[pid] = _text(buf, process, _PT_PROCESS_CMDLINE) or ""
        for _, o, s in tree.get(_PT_THREADS, ()):
            thread = _fields(buf, o, o + s)
            tid = _int(thread, _PT_THREAD_TID)
            pid = _int(thread, _PT_THREAD_TGID)
            self.threads[tid] = (pid, _text(buf, thread, _PT_THREAD_NAME) or "")

    def _clock_snapshot(self, buf: memoryview, pos: int, end: int, seq: _Sequence) -> None:
        for _, o, s in _fields(buf, pos, end).get(ClockSnapshot_clocks_ID, ()):
            clock = _fields(buf, o, o + s)
            clock_id = _int(clock, ClockSnapshot_Clock_clock_id_ID)
            if _int(clock, ClockSnapshot_Clock_is_incremental_ID) and (
                clock_id >= _FIRST_SEQUENCE_SCOPED_CLOCK
            ):
                seq.clocks[clock_id] = _int(clock, ClockSnapshot_Clock_timestamp_ID)

    def _trace_stats(self, buf: memoryview, pos: int, end: int, _seq: _Sequence) -> None:
        self.trace_stats = bytes(buf[pos:end])

    def finish(self) -> None:
        """Counts the slices still open at the end of the trace."""
        self.unterminated_slices = sum(len(stack) for stack in self._open.values())


_PACKET_METADATA = frozenset({
    _P_TIMESTAMP, _P_SEQUENCE_ID, _P_INTERNED_DATA, _P_SEQUENCE_FLAGS,
    _P_INCREMENTAL_STATE_CLEARED, _P_PREVIOUS_PACKET_DROPPED, _P_TIMESTAMP_CLOCK_ID, _P_DEFAULTS,
    3, 79, 87, 98,  # trusted_uid, trusted_pid, first_packet_on_sequence, machine_id
})  # fmt: skip

_Handler = Callable[[TraceSummary, memoryview, int, int, _Sequence], None]
_HANDLERS: dict[int, _Handler] = {
    _P_TRACK_DESCRIPTOR: TraceSummary._track_descriptor,
    _P_PROCESS_DESCRIPTOR: TraceSummary._process_descriptor,
    _P_THREAD_DESCRIPTOR: TraceSummary._thread_descriptor,
    _P_PROCESS_TREE: TraceSummary._process_tree,
    _P_CLOCK_SNAPSHOT: TraceSummary._clock_snapshot,
    _P_TRACE_STATS: TraceSummary._trace_stats,
}


def _feed(summary: TraceSummary) -> Callable[[bytes, int], int]:
    """The `perfetto_service.read_trace_file` decoder that adds each packet to `summary`."""
    add = summary.add_packet

    def feed(data: bytes, base: int) -> int:
        buf = memoryview(data)
        end = len(data)
        pos = 0
        while pos < end:
            start = pos
            if buf[pos] == TRACE_PACKET_TAG and pos + 2 < end:  # the common case, inline
                size = buf[pos + 1]
                if size < 0x80:
                    pos += 2
                else:
                    size, pos = read_varint(buf, pos + 1, end)
                    if pos < 0:
                        return start
                if size > end - pos:
                    return start
                try:
                    add(buf, pos, pos + size)
                except CorruptTraceError as exc:
                    raise CorruptTraceError(f"the packet at offset {base + start}: {exc}") from None
                pos += size
                continue
            tag, pos = read_varint(buf, pos, end)
            if pos < 0:
                return start
            wire_type = tag & 7
            if wire_type == 2:
                size, pos = read_varint(buf, pos, end)
                if pos < 0 or size > end - pos:
                    return start
                if tag == TRACE_PACKET_TAG:
                    try:
                        add(buf, pos, pos + size)
                    except CorruptTraceError as exc:
                        raise CorruptTraceError(
                            f"the packet at offset {base + start}: {exc}"
                        ) from None
                pos += size
            elif wire_type == 0:
                _, pos = read_varint(buf, pos, end)
                if pos < 0:
                    return start
            else:
                raise CorruptTraceError(
                    f"offset {base + start} holds wire type {wire_type}, not a TracePacket"
                )
        return end

    return feed


def _ms(ns: int) -> str:
    return f"{ns / 1e6:.3f}"


def _trace_stats_lines(raw: bytes) -> list[str]:
    from perfetto_protos.upstream import upstream_message_class

    stats: Any = upstream_message_class("perfetto.protos.TraceStats").FromString(raw)
    lines = []
    highlights = [
        "producers_connected", "producers_seen", "data_sources_registered", "tracing_sessions",
        "chunks_discarded", "patches_discarded", "invalid_packets", "flushes_requested",
        "flushes_succeeded", "flushes_failed",
    ]  # fmt: skip
    top = [f"{n}={getattr(stats, n)}" for n in highlights if getattr(stats, n, 0)]
    if top:
        lines.append("  " + " ".join(top))
    per_buffer = [
        "buffer_size", "bytes_written", "chunks_written", "chunks_overwritten",
        "chunks_discarded", "chunks_rewritten", "abi_violations", "trace_writer_packet_loss",
        "patches_failed", "readaheads_failed",
    ]  # fmt: skip
    for index, buffer in enumerate(stats.buffer_stats):
        values = [f"{n}={getattr(buffer, n)}" for n in per_buffer if getattr(buffer, n, 0)]
        lines.append(f"  buffer {index}: " + " ".join(values))
    return lines


def _packet_type_names() -> dict[int, str]:
    from perfetto_protos.upstream import upstream_pool

    descriptor = upstream_pool().FindMessageTypeByName("perfetto.protos.TracePacket")
    return {f.number: f.name for f in descriptor.fields}


def _more(count: int, what: str, indent: str = "  ") -> list[str]:
    return [f"{indent}... {count:,} more {what}"] if count > 0 else []


def format_summary(path: str, summary: TraceSummary, limit: int = ROWS) -> str:
    """The report for `summary`: at most `limit` rows per table, the rest counted."""
    names = _packet_type_names()
    out = [f"{path}: {summary.size} bytes, {summary.packets} packets"]
    if summary.truncated_at is not None:
        out.append(
            f"  truncated: the last packet is incomplete (from offset {summary.truncated_at})"
        )
    out += ["", "Packets by type:"]
    for kind, count in sorted(summary.packet_types.items(), key=lambda kv: -kv[1]):
        label = names.get(kind, f"field {kind}") if kind else "(no data)"
        out.append(f"  {label:<40} {count:>12}")
    if summary.slices or summary.instants:
        out += ["", "Track events (slices: count, total and max duration in ms):"]
        out.append(f"  {'CATEGORY':<24} {'NAME':<32} {'COUNT':>9} {'TOTAL':>12} {'MAX':>10}")
        rows = heapq.nlargest(limit, summary.slices.items(), key=lambda kv: kv[1].total_ns)
        for (category, name), stats in rows:
            out.append(
                f"  {category:<24} {name:<32} {stats.count:>9} {_ms(stats.total_ns):>12} "
                f"{_ms(stats.max_ns):>10}"
            )
        out += _more(len(summary.slices) - len(rows), "slice names")
        instants = summary.instants.most_common(limit)
        for (category, name), count in instants:
            out.append(f"  {category:<24} {name:<32} {count:>9} {'(instant)':>12}")
        out += _more(len(summary.instants) - len(instants), "instant names")
        if summary.unterminated_slices:
            out.append(f"  {summary.unterminated_slices} slices did not end before the trace did")
    if summary.counters:
        out += ["", "Counters:"]
        out.append(f"  {'NAME':<40} {'SAMPLES':>9} {'MIN':>12} {'MAX':>12} {'LAST':>12}")
        counters = _first(limit, summary.counters.items())
        for name, c in counters:
            out.append(f"  {name:<40} {c.count:>9} {c.low:>12g} {c.high:>12g} {c.last:>12g}")
        out += _more(len(summary.counters) - len(counters), "counters")
    if summary.processes or summary.threads:
        out += ["", f"Processes: {len(summary.processes)}, threads: {len(summary.threads)}"]
        by_pid: dict[int, list[str]] = {}
        for tid, (pid, name) in sorted(summary.threads.items()):
            by_pid.setdefault(pid, []).append(f"{tid} {name}".rstrip())
        pids = sorted(set(summary.processes) | set(by_pid))
        for pid in pids[:limit]:
            out.append(f"  pid {pid} {summary.processes.get(pid, '')}".rstrip())
            for thread in by_pid.get(pid, [])[:limit]:
                out.append(f"    tid {thread}")
            out += _more(len(by_pid.get(pid, [])) - limit, "threads", "    ")
        out += _more(len(pids) - limit, "processes")
    out += ["", "Data losses:"]
    out.append(f"  packets that follow lost ones on their sequence: {summary.packets_after_loss}")
    if summary.trace_stats is not None:
        out += ["", "TraceStats (last):", *_trace_stats_lines(summary.trace_stats)]
    return "\n".join(out) + "\n"


def _first(
    limit: int, items: Iterable[tuple[str, _CounterStats]]
) -> list[tuple[str, _CounterStats]]:
    """The first `limit` of `items` in name order."""
    return heapq.nsmallest(limit, items, key=lambda kv: kv[0])


def summarize(path: str, chunk_size: int = CHUNK_SIZE) -> TraceSummary:
    """Reads the trace at `path` and summarizes it (raises `perfetto_service.TraceFileError`)."""
    summary = TraceSummary()
    end = read_trace_file(path, _feed(summary), chunk_size)
    summary.size = end.size
    summary.truncated_at = end.truncated_at
    summary.finish()
    return summary


def summarize_file(path: str, out: TextIO, limit: int = ROWS) -> int:
    """Prints the summary of the trace at `path` to `out`, `limit` rows per table; 0, or
    `CliError` (unreadable, not a Perfetto trace, corrupt)."""
    try:
        summary = summarize(path)
    except TraceFileError as exc:
        raise CliError(str(exc)) from None
    if not summary.packets:
        raise CliError(f"{path} is not a Perfetto trace (no complete TracePacket in it)")
    out.write(format_summary(path, summary, limit))
    return 0
