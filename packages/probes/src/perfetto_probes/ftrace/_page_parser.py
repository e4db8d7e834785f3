"""Parses the binary pages of one CPU's ftrace ring buffer into FtraceEventBundle packets.

Every offset comes from the kernel's own descriptions (`events/header_page`, `header_event` and
each event's `format`, read by `_formats`): this module only walks the records they describe.
A page that cannot be walked to its end keeps the events before the fault and records a
`FtraceEventBundle.FtraceError` with the reason; nothing raises.
"""

from __future__ import annotations

try:
    import cython
except ImportError:  # installed without Cython: runs as pure Python
    from protozero import _cython_shim as cython

from array import array

from protozero import encode_varint

if not cython.compiled:  # mypy checks the pure build's names
    from perfetto_protos.tags import fields as tags
    from protozero._proto_utils import store_redundant_varint, store_varint
else:
    from cython.cimports.cpython.bytes import PyBytes_FromStringAndSize
    from cython.cimports.libc.string import memcpy
    from cython.cimports.perfetto_protos.tags import fields_c as tags  # type: ignore[no-redef]
    from cython.cimports.protozero._proto_utils import (  # type: ignore[no-redef]
        store_redundant_varint,
        store_varint,
    )
    from cython.cimports.protozero._varint import put_varint

# How a field's bytes are read (FieldLayout.kind).
_KIND_INT = 0
_KIND_CHARS = 1  # char name[N]: up to the first NUL
_KIND_DATA_LOC = 2  # __data_loc char[] name: a u32 (offset | length << 16) into the record
_KIND_TAIL = 3  # char name[]: from its offset to the record's end

# What a layout's events become (EventLayout.compact).
_COMPACT_NONE = 0
_COMPACT_SWITCH = 1
_COMPACT_WAKING = 2

_MISSED_EVENTS = 0x80000000  # commit flag: the kernel overwrote events before this page
_DATA_SIZE_MASK = 0x7FFFFFF  # commit's low 27 bits: the bytes of records on the page
_TIME_DELTA_SHIFT = 27
_UINT64_MASK = 0xFFFFFFFFFFFFFFFF
# Typed constants (not literals: a literal above a C long is a Python int in the compiled build).
_LOW32_MASK = 0xFFFFFFFF
_HIGH32_MASK = _UINT64_MASK ^ _LOW32_MASK
_LENGTH_SIZE = 4  # nested messages get a 4-byte (redundant) length, back-filled
_PAGES_PER_BUNDLE = 64  # a drain of more pages is split into several bundles
# The compiled build finds a recent comm's intern index by a hash of its bytes, in slots of
# _COMM_KEY bytes (its length + 1, 0 for an empty slot, then the comm), without a bytes object.
_COMM_SLOTS = 64  # a power of 2
_COMM_MAX = 16  # TASK_COMM_LEN: longer comms skip the slots
_COMM_KEY = 1 + _COMM_MAX
_PID_SLOTS = 256  # seen pids remembered by their low bits, so that most skip the set (a power of 2)


# The same values under public names, for the modules that build layouts.
COMPACT_NONE = _COMPACT_NONE
COMPACT_SWITCH = _COMPACT_SWITCH
COMPACT_WAKING = _COMPACT_WAKING
KIND_CHARS = _KIND_CHARS
KIND_DATA_LOC = _KIND_DATA_LOC
KIND_INT = _KIND_INT
KIND_TAIL = _KIND_TAIL


class FieldLayout:
    """One field of an event's format: where it is, how to read it and where it goes."""

    __slots__ = ("kind", "name_field", "offset", "signed", "size", "tag")

    def __init__(
        self, *, kind: int, offset: int, size: int, signed: bool, tag: int, name_field: bytes
    ) -> None:
        self.kind = kind
        self.offset = offset
        self.size = size
        self.signed = signed
        self.tag = tag  # the typed message's field tag; 0: left out of the typed message
        self.name_field = name_field  # GenericFtraceEvent.Field.name, encoded with its tag


class EventLayout:
    """How one event id's records become FtraceEvents."""

    __slots__ = (
        "bound",
        "compact",
        "compact_fields",
        "event_tag",
        "fields",
        "generic",
        "min_size",
        "name_field",
        "pid_fields",
        "strings",
    )

    def __init__(
        self,
        *,
        event_tag: int,
        generic: bool,
        name_field: bytes,
        fields: list[FieldLayout],
        compact: int,
        compact_fields: list[FieldLayout],
        pid_fields: list[FieldLayout],
        min_size: int,
    ) -> None:
        self.event_tag = event_tag  # FtraceEvent's tag of the typed message or of `generic`
        self.generic = generic
        self.name_field = name_field  # GenericFtraceEvent.event_name, encoded with its tag
        self.fields = fields
        self.compact = compact
        # sched_switch: prev_state, next_pid, next_prio, next_comm;
        # sched_waking: pid, target_cpu, prio, comm, common_flags.
        self.compact_fields = compact_fields
        self.pid_fields = pid_fields  # fields holding a thread id seen by this event
        self.min_size = min_size  # the record bytes the fixed fields need
        # The bytes an event takes at most, beyond its strings (each at most the record's size).
        self.bound = 64 + len(name_field) + sum(len(f.name_field) + 32 for f in fields)
        self.strings = sum(1 for f in fields if f.kind != _KIND_INT)


class PageLayout:
    """Where the page header's fields are (`events/header_page`) and the record types
    (`events/header_event`)."""

    __slots__ = (
        "commit_offset",
        "commit_size",
        "common_pid_offset",
        "data_offset",
        "page_size",
        "type_padding",
        "type_time_extend",
        "type_time_stamp",
    )

    def __init__(
        self,
        *,
        page_size: int,
        commit_offset: int,
        commit_size: int,
        data_offset: int,
        type_padding: int,
        type_time_extend: int,
        type_time_stamp: int,
        common_pid_offset: int,
    ) -> None:
        self.page_size = page_size
        self.commit_offset = commit_offset
        self.commit_size = commit_size
        self.data_offset = data_offset
        self.type_padding = type_padding
        self.type_time_extend = type_time_extend
        self.type_time_stamp = type_time_stamp
        self.common_pid_offset = common_pid_offset


def _uint(buf: bytes, p: int, size: int) -> int:
    """The little-endian unsigned integer of `size` bytes at `buf[p]`."""
    value = 0
    i = size - 1
    while i >= 0:
        value = (value << 8) | buf[p + i]
        i -= 1
    return value


def _int(buf: bytes, p: int, size: int, signed: bool) -> int:
    """The integer of `size` bytes at `buf[p]`, as a 64-bit two's complement pattern."""
    value = _uint(buf, p, size)
    bits = size * 8
    if signed and bits < 64 and (value >> (bits - 1)) & 1:
        value = (value | (_UINT64_MASK << bits)) & _UINT64_MASK
    return value


def _signed32(value: int) -> int:
    """`value`'s low 32 bits as a signed 64-bit two's complement pattern."""
    value &= _LOW32_MASK
    if value >> 31:
        value |= _HIGH32_MASK
    return value


class PackedColumn:
    """One packed repeated varint field of compact_sched: its values, encoded as they come."""

    __slots__ = ("out", "pos", "tag", "view")

    def __init__(self, tag: int) -> None:
        self.tag = tag
        self.out = bytearray(1024)
        self.view = self.out
        self.pos = 0

    def put(self, value: int) -> None:
        """Appends one value."""
        if self.pos + 10 > len(self.out):
            self._grow()  # out of line: the per-value path stays short
        if cython.compiled:  # through a pointer: no memoryview passed by value per value
            start = cython.address(self.view[0])
            self.pos = put_varint(start + self.pos, value) - start
        else:
            self.pos = store_varint(self.view, self.pos, value)

    def _grow(self) -> None:
        grown = bytearray(2 * len(self.out))
        grown[: self.pos] = self.out[: self.pos]
        self.out = grown
        self.view = grown


class BundleWriter:
    """Turns one CPU's pages into FtraceEventBundle packets, one or more per drain."""

    def __init__(
        self,
        cpu: int,
        page: PageLayout,
        events: dict[int, EventLayout],
        compact_sched: bool,
    ) -> None:
        self.cpu = cpu
        self.page = page
        # The layouts by event id (ids are 16 bits); None for the ids this writer skips.
        self.by_id: list[EventLayout | None] = [None] * (max(events, default=0) + 1)
        for event_id, layout in events.items():
            self.by_id[event_id] = layout
        self.compact_sched = compact_sched
        self.out = bytearray(1 << 16)
        self.view = self.out
        self.pos = 0
        self.packets: list[bytes] = []
        self.seen_pids: set[int] = set()
        # pid + 1 in slot pid % _PID_SLOTS: the pids already in seen_pids (0: none).
        self.recent_pids = array("Q", bytes(8 * _PID_SLOTS))
        self.parse_errors: set[int] = set()
        self.events_written = 0
        self.last_timestamp = 0  # of the last event written, in any bundle
        self.bundle_start_timestamp = 0  # previous_bundle_end_timestamp of the open bundle
        self.pages_in_bundle = 0
        self.open = False
        self.lost_events = False
        self.errors: list[tuple[int, int]] = []
        self.intern: dict[bytes, int] = {}
        if cython.compiled:
            self.comm_keys = bytearray(_COMM_SLOTS * _COMM_KEY)
            self.comm_indexes = array("q", bytes(8 * _COMM_SLOTS))
        # compact_sched's columns, in the order of their fields in _compact.
        self.switch_columns = [
            PackedColumn(tags.FtraceEventBundle_CompactSched_switch_timestamp_TAG),
            PackedColumn(tags.FtraceEventBundle_CompactSched_switch_prev_state_TAG),
            PackedColumn(tags.FtraceEventBundle_CompactSched_switch_next_pid_TAG),
            PackedColumn(tags.FtraceEventBundle_CompactSched_switch_next_prio_TAG),
            PackedColumn(tags.FtraceEventBundle_CompactSched_switch_next_comm_index_TAG),
        ]
        self.waking_columns = [
            PackedColumn(tags.FtraceEventBundle_CompactSched_waking_timestamp_TAG),
            PackedColumn(tags.FtraceEventBundle_CompactSched_waking_pid_TAG),
            PackedColumn(tags.FtraceEventBundle_CompactSched_waking_target_cpu_TAG),
            PackedColumn(tags.FtraceEventBundle_CompactSched_waking_prio_TAG),
            PackedColumn(tags.FtraceEventBundle_CompactSched_waking_comm_index_TAG),
            PackedColumn(tags.FtraceEventBundle_CompactSched_waking_common_flags_TAG),
        ]
        self.last_switch_ts = 0
        self.last_waking_ts = 0

    def _reserve(self, size: int) -> None:
        """Makes room for `size` more bytes at `pos`."""
        if self.pos + size <= len(self.out):
            return
        grown = bytearray(max(2 * len(self.out), self.pos + size))
        grown[: self.pos] = self.out[: self.pos]
        self.out = grown
        self.view = grown

    def _open_bundle(self, lost_events: bool) -> None:
        if self.open:
            return
        self.open = True
        self.lost_events = lost_events
        self.bundle_start_timestamp = self.last_timestamp
        self.pos = 0
        self._reserve(16)
        self.pos = store_varint(self.view, self.pos, tags.FtraceEventBundle_cpu_TAG)
        self.pos = store_varint(self.view, self.pos, self.cpu)

    def parse_page(self, buf: bytes) -> int:
        """Adds the records of one page (page_size bytes) to the open bundle; returns the
        FtraceParseStatus of the page (FTRACE_STATUS_OK when it was walked to its end)."""
        layout = self.page
        if len(buf) < layout.data_offset:
            return self._page_error(0, tags.FTRACE_STATUS_ABI_INVALID_PAGE_HEADER)
        # The compiled build walks the page through a pointer: a memoryview is copied per call.
        data = cython.address(buf[0]) if cython.compiled else buf
        page_ts = _uint(data, 0, 8)
        commit = _uint(data, layout.commit_offset, layout.commit_size)
        missed = (commit & _MISSED_EVENTS) != 0
        if missed or self.pages_in_bundle >= _PAGES_PER_BUNDLE:
            self.finish()
        self._open_bundle(missed)
        self.pages_in_bundle += 1
        size = commit & _DATA_SIZE_MASK
        if size > len(buf) - layout.data_offset:
            return self._page_error(page_ts, tags.FTRACE_STATUS_ABI_INVALID_PAGE_HEADER)
        status = self._parse_records(data, layout.data_offset, layout.data_offset + size, page_ts)
        if status != tags.FTRACE_STATUS_OK:
            return self._page_error(page_ts, status)
        return tags.FTRACE_STATUS_OK

    def _page_error(self, timestamp: int, status: int) -> int:
        self._open_bundle(False)
        self.errors.append((timestamp, status))
        self.parse_errors.add(status)
        return status

    def _parse_records(self, buf: bytes, p: int, end: int, ts: int) -> int:
        layout = self.page
        while p < end:
            if end - p < 4:
                return tags.FTRACE_STATUS_ABI_SHORT_EVENT_HEADER
            header = _uint(buf, p, 4)
            p += 4
            type_len = header & 0x1F
            ts += header >> 5
            if type_len == layout.type_padding:
                if (header >> 5) == 0:
                    return tags.FTRACE_STATUS_OK  # the rest of the page is padding
                if end - p < 4:
                    return tags.FTRACE_STATUS_ABI_SHORT_PADDING_LENGTH
                length = _uint(buf, p, 4)
                if length < 4:
                    return tags.FTRACE_STATUS_ABI_INVALID_PADDING_LENGTH
                p += length
            elif type_len == layout.type_time_extend:
                if end - p < 4:
                    return tags.FTRACE_STATUS_ABI_SHORT_TIME_EXTEND
                ts += _uint(buf, p, 4) << _TIME_DELTA_SHIFT
                p += 4
            elif type_len == layout.type_time_stamp:
                if end - p < 4:
                    return tags.FTRACE_STATUS_ABI_SHORT_TIME_STAMP
                ts = (header >> 5) + (_uint(buf, p, 4) << _TIME_DELTA_SHIFT)
                p += 4
            else:
                if type_len == 0:
                    if end - p < 4:
                        return tags.FTRACE_STATUS_ABI_SHORT_DATA_LENGTH
                    size = _uint(buf, p, 4)
                    p += 4
                    if size == 0:
                        return tags.FTRACE_STATUS_ABI_ZERO_DATA_LENGTH
                    if size < 4:
                        return tags.FTRACE_STATUS_ABI_INVALID_DATA_LENGTH
                    size -= 4
                else:
                    size = 4 * type_len
                if size > end - p:
                    return tags.FTRACE_STATUS_ABI_END_OVERFLOW
                if size < 2:
                    return tags.FTRACE_STATUS_ABI_SHORT_EVENT_ID
                status = self._record(buf, p, size, ts)
                if status != tags.FTRACE_STATUS_OK:
                    return status
                p += size
        return tags.FTRACE_STATUS_OK

    def _record(self, buf: bytes, start: int, size: int, ts: int) -> int:
        """Writes the record of `size` bytes at `buf[start]`, recorded at `ts`."""
        event_id = _uint(buf, start, 2)
        event = self.by_id[event_id] if event_id < len(self.by_id) else None
        if event is None:
            return tags.FTRACE_STATUS_OK  # an event this data source did not enable
        if size < event.min_size:
            if event.compact != _COMPACT_NONE and self.compact_sched:
                return tags.FTRACE_STATUS_SHORT_COMPACT_EVENT
            return tags.FTRACE_STATUS_INVALID_EVENT
        pid = _uint(buf, start + self.page.common_pid_offset, 4)
        self._saw_pid(pid)
        for field in event.pid_fields:
            self._saw_pid(_uint(buf, start + field.offset, 4))
        self.events_written += 1
        self.last_timestamp = ts
        if self.compact_sched and event.compact != _COMPACT_NONE:
            self._compact(buf, start, size, ts, event)
            return tags.FTRACE_STATUS_OK
        self._reserve(event.bound + event.strings * size)
        view = self.view
        p = store_varint(view, self.pos, tags.FtraceEventBundle_event_TAG)
        event_start = p + _LENGTH_SIZE
        p = store_varint(view, event_start, tags.FtraceEvent_timestamp_TAG)
        p = store_varint(view, p, ts)
        p = store_varint(view, p, tags.FtraceEvent_pid_TAG)
        p = store_varint(view, p, pid)
        p = store_varint(view, p, event.event_tag)
        body = p + _LENGTH_SIZE
        if event.generic:
            p = self._copy(view, body, event.name_field)
            for field in event.fields:
                p = store_varint(view, p, tags.GenericFtraceEvent_field_TAG)
                field_start = p + _LENGTH_SIZE
                p = self._copy(view, field_start, field.name_field)
                p = self._value(view, p, buf, start, size, field, True)
                store_redundant_varint(view, field_start - _LENGTH_SIZE, p - field_start, 4)
        else:
            p = body
            for field in event.fields:
                if field.tag != 0:
                    p = self._value(view, p, buf, start, size, field, False)
        store_redundant_varint(view, body - _LENGTH_SIZE, p - body, 4)
        store_redundant_varint(view, event_start - _LENGTH_SIZE, p - event_start, 4)
        self.pos = p
        return tags.FTRACE_STATUS_OK

    def _saw_pid(self, pid: int) -> None:
        """Adds `pid` to seen_pids."""
        slot = pid & (_PID_SLOTS - 1)
        if self.recent_pids[slot] != pid + 1:
            self.recent_pids[slot] = pid + 1
            self.seen_pids.add(pid)

    def take_seen_pids(self) -> set[int]:
        """The thread ids seen in events since the last call."""
        pids = self.seen_pids
        self.seen_pids = set()
        slot = 0
        while slot < _PID_SLOTS:
            self.recent_pids[slot] = 0
            slot += 1
        return pids

    def _copy(self, view: bytearray, p: int, data: bytes) -> int:
        """Stores `data` at `view[p]`; returns the position after it."""
        n = len(data)
        if cython.compiled:  # one memcpy from the bytes' buffer, not an item lookup per byte
            memcpy(cython.address(view[p]), cython.cast(cython.p_char, data), n)
        else:
            view[p : p + n] = data
        return p + n

    def _string_span(
        self, buf: bytes, start: int, size: int, field: FieldLayout
    ) -> tuple[int, int]:
        """Where a string field's characters are in `buf`: (first, end), NUL excluded."""
        if field.kind == _KIND_CHARS:
            first = start + field.offset
            last = first + field.size
        elif field.kind == _KIND_DATA_LOC:
            loc = _uint(buf, start + field.offset, 4)
            first = start + (loc & 0xFFFF)
            last = first + (loc >> 16)
            last = min(last, start + size)
            first = min(first, last)
        else:
            first = start + field.offset
            last = start + size
        end = first
        while end < last and buf[end] != 0:
            end += 1
        return first, end

    def _value(  # noqa: PLR0917 - a C method: positional
        self,
        view: bytearray,
        p: int,
        buf: bytes,
        start: int,
        size: int,
        field: FieldLayout,
        generic: bool,
    ) -> int:
        """Stores one field's value with its tag (the typed one, or GenericFtraceEvent.Field's
        value tag) at `view[p]`; returns the position after it."""
        if field.kind == _KIND_INT:
            value = _int(buf, start + field.offset, field.size, field.signed)
            if generic:
                tag = (
                    tags.GenericFtraceEvent_Field_int_value_TAG
                    if field.signed
                    else tags.GenericFtraceEvent_Field_uint_value_TAG
                )
            else:
                tag = field.tag
            p = store_varint(view, p, tag)
            p = store_varint(view, p, value)
        else:
            first, end = self._string_span(buf, start, size, field)
            tag = tags.GenericFtraceEvent_Field_str_value_TAG if generic else field.tag
            p = store_varint(view, p, tag)
            p = store_varint(view, p, end - first)
            while first < end:
                view[p] = buf[first]
                p += 1
                first += 1
        return p

    def _comm_index(self, buf: bytes, start: int, size: int, field: FieldLayout) -> int:
        first, end = self._string_span(buf, start, size, field)
        n = end - first
        if not cython.compiled:
            comm = bytes(buf[first:end])
        else:
            slot = 0
            if n <= _COMM_MAX:
                h = 2166136261  # FNV-1a, 32 bits (C unsigned int arithmetic)
                i = first
                while i < end:
                    h = (h ^ buf[i]) * 16777619
                    i += 1
                slot = h & (_COMM_SLOTS - 1)
                key = slot * _COMM_KEY
                if self.comm_keys[key] == n + 1:
                    i = 0
                    while i < n and self.comm_keys[key + 1 + i] == buf[first + i]:
                        i += 1
                    if i == n:
                        return self.comm_indexes[slot]
            comm = PyBytes_FromStringAndSize(
                cython.cast(cython.p_char, cython.address(buf[first])), n
            )
        index = self.intern.get(comm)
        if index is None:
            index = len(self.intern)
            self.intern[comm] = index
        if cython.compiled and n <= _COMM_MAX:
            key = slot * _COMM_KEY
            self.comm_keys[key] = n + 1
            i = 0
            while i < n:
                self.comm_keys[key + 1 + i] = buf[first + i]
                i += 1
            self.comm_indexes[slot] = index
        return index

    def _compact(self, buf: bytes, start: int, size: int, ts: int, event: EventLayout) -> None:
        fields = event.compact_fields
        if event.compact == _COMPACT_SWITCH:
            columns = self.switch_columns
            column = columns[0]
            column.put((ts - self.last_switch_ts) & _UINT64_MASK)  # wraps as a uint64
            self.last_switch_ts = ts
        else:
            columns = self.waking_columns
            column = columns[0]
            column.put((ts - self.last_waking_ts) & _UINT64_MASK)
            self.last_waking_ts = ts
        last = len(fields) - 1
        for i, field in enumerate(fields):
            column = columns[i + 1]
            if i == 3:
                column.put(self._comm_index(buf, start, size, field))
            elif i == last and event.compact == _COMPACT_WAKING:
                column.put(_uint(buf, start + field.offset, field.size))
            else:
                value = _int(buf, start + field.offset, field.size, field.signed)
                keep_64 = i == 0 and event.compact == _COMPACT_SWITCH  # prev_state is an int64
                column.put(value if keep_64 else _signed32(value))

    def _packed(self, column: PackedColumn) -> None:
        """Writes a column with its tag and length, and empties it."""
        if column.pos == 0:
            return
        self._reserve(16 + column.pos)
        view = self.view
        p = store_varint(view, self.pos, column.tag)
        p = store_varint(view, p, column.pos)
        values = column.view
        i = 0
        while i < column.pos:
            view[p + i] = values[i]
            i += 1
        self.pos = p + column.pos
        column.pos = 0

    def _write_compact(self) -> None:
        if self.switch_columns[0].pos == 0 and self.waking_columns[0].pos == 0:
            return
        self._reserve(16)
        self.pos = store_varint(self.view, self.pos, tags.FtraceEventBundle_compact_sched_TAG)
        begin = self.pos + _LENGTH_SIZE
        self.pos = begin
        for comm in self.intern:
            self._reserve(16 + len(comm))
            p = store_varint(
                self.view, self.pos, tags.FtraceEventBundle_CompactSched_intern_table_TAG
            )
            p = store_varint(self.view, p, len(comm))
            self.pos = self._copy(self.view, p, comm)
        for column in self.switch_columns:
            self._packed(column)
        for column in self.waking_columns:
            self._packed(column)
        store_redundant_varint(self.view, begin - _LENGTH_SIZE, self.pos - begin, 4)
        self.intern = {}
        if cython.compiled:
            slot = 0
            while slot < _COMM_SLOTS:
                self.comm_keys[slot * _COMM_KEY] = 0
                slot += 1
        self.last_switch_ts = 0
        self.last_waking_ts = 0

    def finish(self) -> None:
        """Closes the open bundle, if any, into `packets`."""
        if not self.open:
            return
        self._write_compact()
        self._reserve(32 + 32 * len(self.errors))
        view = self.view
        p = self.pos
        if self.lost_events:
            p = store_varint(view, p, tags.FtraceEventBundle_lost_events_TAG)
            p = store_varint(view, p, 1)
        for timestamp, status in self.errors:
            p = store_varint(view, p, tags.FtraceEventBundle_error_TAG)
            begin = p + _LENGTH_SIZE
            p = store_varint(view, begin, tags.FtraceEventBundle_FtraceError_timestamp_TAG)
            p = store_varint(view, p, timestamp)
            p = store_varint(view, p, tags.FtraceEventBundle_FtraceError_status_TAG)
            p = store_varint(view, p, status)
            store_redundant_varint(view, begin - _LENGTH_SIZE, p - begin, 4)
        if self.bundle_start_timestamp:
            p = store_varint(view, p, tags.FtraceEventBundle_previous_bundle_end_timestamp_TAG)
            p = store_varint(view, p, self.bundle_start_timestamp)
        self.pos = p
        head = encode_varint(tags.TracePacket_ftrace_events_TAG) + encode_varint(p)
        self.packets.append(head + bytes(self.out[:p]))
        self.errors = []
        self.open = False
        self.pages_in_bundle = 0
        self.pos = 0

    def take_packets(self) -> list[bytes]:
        """The finished packets, each a serialized TracePacket; closes the open bundle."""
        self.finish()
        packets = self.packets
        self.packets = []
        return packets
