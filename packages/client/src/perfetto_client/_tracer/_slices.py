"""Rebuilds the slices of a trace from its TrackEvent begin/end packets, per function.

`SliceReader.feed` takes the bytes of a Trace (whole packets; it says where the first
incomplete one starts) and decodes every TracePacket field by field with protozero's wire
format: incremental state per sequence (interned event names and source locations, packet
defaults, the incremental clock of a clock snapshot), then TYPE_SLICE_BEGIN / TYPE_SLICE_END
on a stack per track and sequence (the slices of one sequence nest with each other only:
perfetto-trace's calls with calls, the program's own track events with its own events; a
file holds each sequence in time order, not the sequences). Each ended slice adds to its
function (by name): calls, self time, the longest call, and total time counted once per
outermost call (a recursive function's inner calls are inside it already). The longest
`limit` slices are kept. A `SliceObserver` given to the reader is told of each slice as it
begins and ends, and of each instant event and counter value, in the same pass (the HTML
report's call tree and timeline). Upstream's field numbers.

Compiled with Cython's pure-Python mode (`_slices.pxd`); runs as is where it was not built.
"""

from __future__ import annotations

import heapq
import struct

try:
    import cython
except ImportError:  # installed without Cython: runs as pure Python
    from protozero import _cython_shim as cython

from perfetto_service import CorruptTraceError

if not cython.compiled:  # mypy checks the pure build's names
    from perfetto_protos.tags import fields as tags
    from protozero import read_varint
else:
    from cython.cimports.perfetto_protos.tags import fields_c as tags  # type: ignore[no-redef]
    from cython.cimports.protozero._varint import read_varint  # type: ignore[no-redef]

__all__ = ["Frame", "Function", "SliceObserver", "SliceReader", "Track"]

_SLICE_BEGIN = tags.TrackEvent_Type_TYPE_SLICE_BEGIN
_SLICE_END = tags.TrackEvent_Type_TYPE_SLICE_END
_INSTANT = tags.TrackEvent_Type_TYPE_INSTANT
_COUNTER = tags.TrackEvent_Type_TYPE_COUNTER
_DOUBLE = struct.Struct("<d")
_FIRST_INCREMENTAL_CLOCK = 64
_PROCESS_TREE = tags.TracePacket_process_tree_ID
_PROCESSES = tags.ProcessTree_processes_ID
_PROCESS_PID = tags.ProcessTree_Process_pid_ID
_PROCESS_CMDLINE = tags.ProcessTree_Process_cmdline_ID


class Function:
    """The ended slices of one name: calls, times in ns, where it is defined."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.location = ""
        self.calls = 0
        self.total_ns = 0
        self.self_ns = 0
        self.max_ns = 0
        self.active = 0  # its open slices on the stack `active_stack`
        self.active_stack = 0
        self.others: dict[int, int] | None = None  # open slices on other stacks meanwhile


class Frame:
    """An open slice on a track's stack."""

    def __init__(self) -> None:
        self.func: Function = _NO_FUNCTION
        self.begin = 0
        self.children_ns = 0
        self.outer = False
        self.counted_in_others = False


_NO_FUNCTION = Function("")


class Track:
    """The stack of open slices of one sequence on one track (the frames above `depth` are
    kept for reuse); `key` numbers the stacks."""

    def __init__(self, uuid: int, key: int) -> None:
        self.uuid = uuid
        self.key = key
        self.frames: list[Frame] = []
        self.depth = 0


class SliceObserver:
    """Told by a `SliceReader` of what it decodes, as it decodes it; does nothing (a subclass
    overrides what it takes). Timestamps are in ns, on the trace's clock."""

    def began(self, track: Track, frame: Frame) -> None:
        """`frame` (`track.frames[track.depth - 1]`) began on `track`'s stack."""

    def ended(self, track: Track, frame: Frame, duration: int) -> None:
        """`frame` (`track.frames[track.depth]`) ended, `duration` ns after it began."""

    def instant(self, uuid: int, ts: int, func: Function) -> None:
        """An instant event named `func.name` on track `uuid`."""

    def counter(self, uuid: int, ts: int, value: float) -> None:
        """Counter track `uuid` took `value` (its unit multiplier applied; an incremental
        track's deltas summed)."""


class _Sequence:
    """A packet sequence's incremental state."""

    def __init__(self) -> None:
        self.functions: dict[int, Function] = {}
        self.locations: dict[int, str] = {}
        self.tracks: dict[int, Track] = {}
        self.track: Track | None = None  # the last one used
        self.default_track = 0
        self.default_clock = 0
        self.clock_id = -1
        self.clock_ns = 0


class SliceReader:
    """Accumulates what `feed` decodes; see the module's docstring."""

    def __init__(self, limit: int) -> None:
        self.functions: dict[str, Function] = {}
        self.stacks: list[Track] = []
        self.threads: dict[int, tuple[int, int, str]] = {}  # track uuid -> (pid, tid, name)
        self.processes: dict[int, str] = {}
        self.track_names: dict[int, str] = {}  # track uuid -> its descriptor's name
        # counter track uuid -> [unit multiplier, is incremental, the value so far]
        self.counter_tracks: dict[int, list[float]] = {}
        self.observer: SliceObserver | None = None
        self.slowest: list[tuple[int, int, int, str, int]] = []  # (dur, n, begin, name, track)
        self.limit = limit
        self.threshold = -1
        self.packets = 0
        self.calls = 0
        self.packets_after_loss = 0
        self.unmatched_ends = 0
        self.unnamed = 0
        self.unclocked = 0
        self.first_ns = -1
        self.last_ns = 0
        self._sequences: dict[int, _Sequence] = {}
        self._seq_id = -1
        self._seq = _Sequence()
        self._at = 0
        self._data = b""

    # ---- wire format --------------------------------------------------------------------

    def _varint(self, buf: bytes, pos: int, end: int) -> int:
        """The varint at `pos`; `_at` is where it ends, or -1 when it runs past `end`."""
        if pos < end and buf[pos] < 0x80:
            self._at = pos + 1
            return buf[pos]
        value: int
        value, self._at = read_varint(buf, pos, end)
        return value

    def _skip(self, buf: bytes, pos: int, end: int, wire_type: int, where: str) -> int:
        """Where the field whose value starts at `pos` ends."""
        if wire_type == 0:
            self._varint(buf, pos, end)
            pos = self._at
        elif wire_type == 2:
            size = self._varint(buf, pos, end)
            pos = self._at
            if pos >= 0:
                pos = pos + size if size <= end - pos else -1
        elif wire_type == 1:
            pos += 8
        elif wire_type == 5:
            pos += 4
        else:
            pos = -1
        if pos < 0 or pos > end:
            raise CorruptTraceError(f"a field of {where} runs past its end")
        return pos

    def _string(self, pos: int, end: int) -> str:
        return self._data[pos:end].decode("utf-8", "replace")

    # ---- the trace ----------------------------------------------------------------------

    def feed(self, data: bytes, pos: int, end: int, base: int) -> int:
        """Decodes the whole packets of the Trace bytes buf[pos:end]; returns where the first
        one that does not end by `end` starts (`end` if none). `base` is buf[0]'s offset in
        the file, for the messages of `CorruptTraceError`."""
        self._data = data
        buf = data
        while pos < end:
            start = pos
            tag = self._varint(buf, pos, end)
            pos = self._at
            if pos < 0:
                return start
            wire_type = tag & 7
            if wire_type == 2:
                size = self._varint(buf, pos, end)
                pos = self._at
                if pos < 0:
                    return start
                if size > end - pos:
                    return start
                if tag == tags.Trace_packet_TAG:
                    try:
                        self._packet(buf, pos, pos + size)
                    except CorruptTraceError as exc:
                        raise CorruptTraceError(
                            f"the packet at offset {base + start}: {exc}"
                        ) from None
                pos += size
            elif wire_type == 0:
                self._varint(buf, pos, end)
                pos = self._at
                if pos < 0:
                    return start
            else:
                raise CorruptTraceError(
                    f"offset {base + start} holds wire type {wire_type}, not a TracePacket"
                )
        return end

    def _packet(self, buf: bytes, pos: int, end: int) -> None:
        ts = 0
        sequence_id = 0
        flags = 0
        cleared = 0
        dropped = 0
        clock = -1
        event = -1
        event_end = 0
        interned = -1
        interned_end = 0
        more_interned: list[tuple[int, int]] | None = None
        defaults = -1
        defaults_end = 0
        other = 0
        other_pos = 0
        other_end = 0
        self.packets += 1
        while pos < end:
            tag = self._varint(buf, pos, end)
            pos = self._at
            if pos < 0:
                raise CorruptTraceError("a tag runs past its end")
            field_id = tag >> 3
            wire_type = tag & 7
            if wire_type == 0:
                value = self._varint(buf, pos, end)
                pos = self._at
                if pos < 0:
                    raise CorruptTraceError("a varint runs past its end")
                if field_id == tags.TracePacket_timestamp_ID:
                    ts = value
                elif field_id == tags.TracePacket_trusted_packet_sequence_id_ID:
                    sequence_id = value
                elif field_id == tags.TracePacket_sequence_flags_ID:
                    flags = value
                elif field_id == tags.TracePacket_timestamp_clock_id_ID:
                    clock = value
                elif field_id == tags.TracePacket_incremental_state_cleared_ID:
                    cleared = value
                elif field_id == tags.TracePacket_previous_packet_dropped_ID:
                    dropped = value
            elif wire_type == 2:
                size = self._varint(buf, pos, end)
                pos = self._at
                if pos < 0:
                    raise CorruptTraceError("a length runs past its end")
                if size > end - pos:
                    raise CorruptTraceError("a field runs past its end")
                if field_id == tags.TracePacket_track_event_ID:
                    event = pos
                    event_end = pos + size
                elif field_id == tags.TracePacket_interned_data_ID:
                    if interned < 0:
                        interned = pos
                        interned_end = pos + size
                    else:
                        if more_interned is None:
                            more_interned = []
                        more_interned.append((pos, pos + size))
                elif field_id == tags.TracePacket_trace_packet_defaults_ID:
                    defaults = pos
                    defaults_end = pos + size
                elif field_id in (
                    tags.TracePacket_clock_snapshot_ID,
                    tags.TracePacket_track_descriptor_ID,
                    _PROCESS_TREE,
                ):
                    other = field_id
                    other_pos = pos
                    other_end = pos + size
                pos += size
            else:
                pos = self._skip(buf, pos, end, wire_type, "a packet")
        seq = self._seq
        if sequence_id != self._seq_id:
            found = self._sequences.get(sequence_id)
            if found is None:
                found = self._sequences[sequence_id] = _Sequence()
                dropped = 0  # traced marks the first packet of every sequence so
            self._seq = seq = found
            self._seq_id = sequence_id
        if dropped:
            self.packets_after_loss += 1
        if cleared or flags & 1:  # SEQ_INCREMENTAL_STATE_CLEARED
            seq.functions = {}
            seq.locations = {}
            seq.default_track = 0
            seq.default_clock = 0
            seq.clock_id = -1
        if defaults >= 0:
            self._defaults(buf, defaults, defaults_end, seq)
        if interned >= 0:
            self._interned(buf, interned, interned_end, seq)
            if more_interned is not None:
                for at, stop in more_interned:
                    self._interned(buf, at, stop, seq)
        if event >= 0:
            if clock < 0:
                clock = seq.default_clock
            if clock >= _FIRST_INCREMENTAL_CLOCK:
                if clock != seq.clock_id:
                    self.unclocked += 1
                    return
                seq.clock_ns += ts
                ts = seq.clock_ns
            self._event(buf, event, event_end, ts, seq)
        elif other == tags.TracePacket_clock_snapshot_ID:
            self._clock_snapshot(buf, other_pos, other_end, seq)
        elif other == tags.TracePacket_track_descriptor_ID:
            self._track_descriptor(buf, other_pos, other_end)
        elif other == _PROCESS_TREE:
            self._process_tree(buf, other_pos, other_end)

    def _event(self, buf: bytes, pos: int, end: int, ts: int, seq: _Sequence) -> None:
        kind = 0
        name_iid = 0
        location_iid = 0
        uuid = seq.default_track
        name_at = -1
        name_end = 0
        number = 0.0
        while pos < end:
            tag = self._varint(buf, pos, end)
            pos = self._at
            if pos < 0:
                raise CorruptTraceError("a tag of its track_event runs past its end")
            wire_type = tag & 7
            if wire_type == 0:
                value = self._varint(buf, pos, end)
                pos = self._at
                if pos < 0:
                    raise CorruptTraceError("a varint of its track_event runs past its end")
                field_id = tag >> 3
                if field_id == tags.TrackEvent_type_ID:
                    kind = value
                elif field_id == tags.TrackEvent_name_iid_ID:
                    name_iid = value
                elif field_id == tags.TrackEvent_track_uuid_ID:
                    uuid = value
                elif field_id == tags.TrackEvent_source_location_iid_ID:
                    location_iid = value
                elif field_id == tags.TrackEvent_counter_value_ID:
                    number = _signed(value)
            elif tag == tags.TrackEvent_name_TAG:
                size = self._varint(buf, pos, end)
                name_at = self._at
                if name_at < 0 or size > end - name_at:
                    raise CorruptTraceError("the name of its track_event runs past its end")
                name_end = name_at + size
                pos = name_end
            elif wire_type == 1 and tag >> 3 == tags.TrackEvent_double_counter_value_ID:
                if end - pos < 8:
                    raise CorruptTraceError("a value of its track_event runs past its end")
                number = _DOUBLE.unpack_from(self._data, pos)[0]
                pos += 8
            else:
                pos = self._skip(buf, pos, end, wire_type, "its track_event")
        if kind not in {_SLICE_BEGIN, _SLICE_END}:
            if self.observer is not None:
                if kind == _COUNTER:
                    self._counter(uuid, ts, number)
                elif kind == _INSTANT:
                    func = self._named(seq, name_at, name_end, name_iid, False)
                    self.observer.instant(uuid, ts, func)
            return
        if self.first_ns < 0 or ts < self.first_ns:
            self.first_ns = ts
        self.last_ns = max(self.last_ns, ts)
        track = seq.track
        if track is None or track.uuid != uuid:
            known = seq.tracks.get(uuid)
            if known is None:
                known = seq.tracks[uuid] = Track(uuid, len(self.stacks))
                self.stacks.append(known)
            seq.track = track = known
        if kind == _SLICE_END:
            self._end(track, ts)
            return
        func = self._named(seq, name_at, name_end, name_iid, True)
        if location_iid and not func.location:
            func.location = seq.locations.get(location_iid, "")
        depth = track.depth
        frames = track.frames
        if depth < len(frames):
            frame = frames[depth]
        else:
            frame = Frame()
            frames.append(frame)
        track.depth = depth + 1
        frame.func = func
        frame.begin = ts
        frame.children_ns = 0
        others = func.others
        key = track.key
        if func.active and func.active_stack == key:
            func.active += 1
            frame.outer = False
            frame.counted_in_others = False
        elif not func.active and (others is None or key not in others):
            func.active = 1
            func.active_stack = key
            frame.outer = True
            frame.counted_in_others = False
        else:
            if others is None:
                others = func.others = {}
            open_here = others.get(key, 0)
            others[key] = open_here + 1
            frame.outer = open_here == 0
            frame.counted_in_others = True
        if self.observer is not None:
            self.observer.began(track, frame)

    def _named(
        self, seq: _Sequence, name_at: int, name_end: int, name_iid: int, call: bool
    ) -> Function:
        """The function an event names, by its string or its interned name (a `call` whose
        name was not interned is counted)."""
        if name_at >= 0:
            return self._function(self._string(name_at, name_end))
        interned = seq.functions.get(name_iid)
        if interned is None:
            self.unnamed += call
            interned = self._function(f"(name {name_iid} not interned)")
        return interned

    def _counter(self, uuid: int, ts: int, value: float) -> None:
        track = self.counter_tracks.get(uuid)
        if track is not None:
            value *= track[0]
            if track[1]:
                value += track[2]
                track[2] = value
        if self.observer is not None:
            self.observer.counter(uuid, ts, value)

    def _end(self, track: Track, ts: int) -> None:
        depth = track.depth
        if not depth:
            self.unmatched_ends += 1
            return
        depth -= 1
        track.depth = depth
        frame = track.frames[depth]
        func = frame.func
        duration = ts - frame.begin
        self.calls += 1
        func.calls += 1
        func.self_ns += duration - frame.children_ns
        func.max_ns = max(func.max_ns, duration)
        if frame.outer:
            func.total_ns += duration
        if frame.counted_in_others:
            others = func.others
            if others is not None:
                open_here = others[track.key] - 1
                if open_here:
                    others[track.key] = open_here
                else:
                    del others[track.key]
        else:
            func.active -= 1
        if depth:
            parent = track.frames[depth - 1]
            parent.children_ns += duration
        if duration > self.threshold:
            self._slow(duration, frame.begin, func.name, track.uuid)
        if self.observer is not None:
            self.observer.ended(track, frame, duration)

    def _slow(self, duration: int, begin: int, name: str, uuid: int) -> None:
        item = (duration, -self.calls, begin, name, uuid)
        if len(self.slowest) < self.limit:
            heapq.heappush(self.slowest, item)
            if len(self.slowest) == self.limit:
                self.threshold = self.slowest[0][0]
        else:
            heapq.heapreplace(self.slowest, item)
            self.threshold = self.slowest[0][0]

    def _function(self, name: str) -> Function:
        func = self.functions.get(name)
        if func is None:
            func = self.functions[name] = Function(name)
        return func

    # ---- incremental state and descriptors (once per batch: plain field walks) --------

    def _fields(self, buf: bytes, pos: int, end: int) -> list[tuple[int, int, int]]:
        """(field id, varint value or payload offset, payload end) of each field."""
        out = []
        while pos < end:
            tag = self._varint(buf, pos, end)
            pos = self._at
            if pos < 0:
                raise CorruptTraceError("a tag runs past its end")
            wire_type = tag & 7
            if wire_type == 0:
                value = self._varint(buf, pos, end)
                pos = self._at
                if pos < 0:
                    raise CorruptTraceError("a varint runs past its end")
                out.append((tag >> 3, value, 0))
            elif wire_type == 2:
                size = self._varint(buf, pos, end)
                pos = self._at
                if pos < 0 or size > end - pos:
                    raise CorruptTraceError("a field runs past its end")
                out.append((tag >> 3, pos, pos + size))
                pos += size
            else:
                pos = self._skip(buf, pos, end, wire_type, "a message")
        return out

    def _defaults(self, buf: bytes, pos: int, end: int, seq: _Sequence) -> None:
        for field_id, value, stop in self._fields(buf, pos, end):
            if field_id == tags.TracePacketDefaults_timestamp_clock_id_ID:
                seq.default_clock = value
            elif field_id == tags.TracePacketDefaults_track_event_defaults_ID:
                for sub_id, sub_value, _ in self._fields(buf, value, stop):
                    if sub_id == tags.TrackEventDefaults_track_uuid_ID:
                        seq.default_track = sub_value

    def _interned(self, buf: bytes, pos: int, end: int, seq: _Sequence) -> None:
        for field_id, at, stop in self._fields(buf, pos, end):
            if field_id == tags.InternedData_event_names_ID:
                iid = 0
                name = ""
                for sub_id, value, sub_end in self._fields(buf, at, stop):
                    if sub_id == tags.EventName_iid_ID:
                        iid = value
                    elif sub_id == tags.EventName_name_ID:
                        name = self._string(value, sub_end)
                seq.functions[iid] = self._function(name)
            elif field_id == tags.InternedData_source_locations_ID:
                iid = 0
                file = ""
                line = 0
                for sub_id, value, sub_end in self._fields(buf, at, stop):
                    if sub_id == tags.SourceLocation_iid_ID:
                        iid = value
                    elif sub_id == tags.SourceLocation_file_name_ID:
                        file = self._string(value, sub_end)
                    elif sub_id == tags.SourceLocation_line_number_ID:
                        line = value
                seq.locations[iid] = f"{file}:{line}" if line else file

    def _clock_snapshot(self, buf: bytes, pos: int, end: int, seq: _Sequence) -> None:
        for field_id, at, stop in self._fields(buf, pos, end):
            if field_id != tags.ClockSnapshot_clocks_ID:
                continue
            clock_id = timestamp = incremental = 0
            for sub_id, value, _ in self._fields(buf, at, stop):
                if sub_id == tags.ClockSnapshot_Clock_clock_id_ID:
                    clock_id = value
                elif sub_id == tags.ClockSnapshot_Clock_timestamp_ID:
                    timestamp = value
                elif sub_id == tags.ClockSnapshot_Clock_is_incremental_ID:
                    incremental = value
            if incremental and clock_id >= _FIRST_INCREMENTAL_CLOCK:
                seq.clock_id = clock_id
                seq.clock_ns = timestamp

    def _track_descriptor(self, buf: bytes, pos: int, end: int) -> None:
        uuid = 0
        thread: tuple[int, int] | None = None
        track_name = ""
        counter: list[float] | None = None
        for field_id, value, stop in self._fields(buf, pos, end):
            if field_id == tags.TrackDescriptor_uuid_ID:
                uuid = value
            elif field_id == tags.TrackDescriptor_name_ID:
                track_name = self._string(value, stop)
            elif field_id == tags.TrackDescriptor_counter_ID:
                counter = [1.0, 0.0, 0.0]
                for sub_id, sub_value, _ in self._fields(buf, value, stop):
                    if sub_id == tags.CounterDescriptor_unit_multiplier_ID and sub_value:
                        counter[0] = float(sub_value)
                    elif sub_id == tags.CounterDescriptor_is_incremental_ID:
                        counter[1] = float(sub_value)
            elif field_id == tags.TrackDescriptor_process_ID:
                pid = 0
                name = ""
                for sub_id, sub_value, sub_end in self._fields(buf, value, stop):
                    if sub_id == tags.ProcessDescriptor_pid_ID:
                        pid = sub_value
                    elif sub_id == tags.ProcessDescriptor_process_name_ID:
                        name = self._string(sub_value, sub_end)
                if name or pid not in self.processes:
                    self.processes[pid] = name
            elif field_id == tags.TrackDescriptor_thread_ID:
                thread = (value, stop)
        if thread is not None:
            pid = tid = 0
            name = ""
            for sub_id, sub_value, sub_end in self._fields(buf, thread[0], thread[1]):
                if sub_id == tags.ThreadDescriptor_pid_ID:
                    pid = sub_value
                elif sub_id == tags.ThreadDescriptor_tid_ID:
                    tid = sub_value
                elif sub_id == tags.ThreadDescriptor_thread_name_ID:
                    name = self._string(sub_value, sub_end)
            self.threads[uuid] = (pid, tid, name)
        elif track_name:
            self.track_names[uuid] = track_name
        if counter is not None and uuid not in self.counter_tracks:
            self.counter_tracks[uuid] = counter

    def _process_tree(self, buf: bytes, pos: int, end: int) -> None:
        for field_id, at, stop in self._fields(buf, pos, end):
            if field_id == _PROCESSES:
                pid = 0
                name = ""
                for sub_id, value, sub_end in self._fields(buf, at, stop):
                    if sub_id == _PROCESS_PID:
                        pid = value
                    elif sub_id == _PROCESS_CMDLINE and not name:  # cmdline[0]
                        name = self._string(value, sub_end)
                self.processes[pid] = name

    def open_slices(self) -> int:
        """The slices that had begun and not ended when the trace did."""
        count = 0
        for track in self.stacks:
            count += track.depth
        return count


def _signed(value: int) -> float:
    """An int64 sent as a varint (two's complement in 64 bits)."""
    return float(value - 0x10000000000000000 if value >= 0x8000000000000000 else value)
