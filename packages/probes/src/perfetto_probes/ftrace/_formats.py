"""The kernel's descriptions of its ring buffer (`events/header_page`, `events/header_event`)
and of each event (`events/GROUP/NAME/format`), turned into the layouts the page parser walks."""

from __future__ import annotations

import re
from dataclasses import dataclass

from perfetto_protos.tags import fields as tags
from protozero import WIRE_TYPE_LENGTH_DELIMITED, encode_varint

from perfetto_probes._errors import ProbesError
from perfetto_probes.ftrace._page_parser import (
    COMPACT_NONE,
    COMPACT_SWITCH,
    COMPACT_WAKING,
    KIND_CHARS,
    KIND_DATA_LOC,
    KIND_INT,
    KIND_TAIL,
    EventLayout,
    FieldLayout,
    PageLayout,
)

__all__ = ["FormatError", "FormatField", "event_layout", "page_layout", "parse_format"]

_FIELD = re.compile(r"field:\s*(.*?);\s*offset:(\d+);\s*size:(\d+);\s*signed:(\d+);")
_TYPE_VALUE = re.compile(r"^\s*(\w+)\s*:\s*type\s*==\s*(\d+)", re.MULTILINE)
_BITS = re.compile(r"^\s*(\w+)\s*:\s*(\d+)\s*bits", re.MULTILINE)

# Events with a typed message: (group, name) -> (FtraceEvent's field, the message).
_TYPED: dict[tuple[str, str], tuple[str, str]] = {
    ("sched", "sched_switch"): ("sched_switch", "SchedSwitchFtraceEvent"),
    ("sched", "sched_waking"): ("sched_waking", "SchedWakingFtraceEvent"),
    ("sched", "sched_wakeup"): ("sched_wakeup", "SchedWakeupFtraceEvent"),
    ("sched", "sched_wakeup_new"): ("sched_wakeup_new", "SchedWakeupNewFtraceEvent"),
    ("sched", "sched_process_fork"): ("sched_process_fork", "SchedProcessForkFtraceEvent"),
    ("sched", "sched_process_exit"): ("sched_process_exit", "SchedProcessExitFtraceEvent"),
    ("sched", "sched_process_free"): ("sched_process_free", "SchedProcessFreeFtraceEvent"),
    ("task", "task_newtask"): ("task_newtask", "TaskNewtaskFtraceEvent"),
    ("task", "task_rename"): ("task_rename", "TaskRenameFtraceEvent"),
    ("ftrace", "print"): ("print", "PrintFtraceEvent"),
    ("power", "cpu_frequency"): ("cpu_frequency", "CpuFrequencyFtraceEvent"),
    ("power", "cpu_idle"): ("cpu_idle", "CpuIdleFtraceEvent"),
}

# The fields of these events that hold a thread id (for process_stats to resolve).
_PID_FIELDS: dict[str, tuple[str, ...]] = {
    "sched_switch": ("prev_pid", "next_pid"),
    "sched_waking": ("pid",),
    "sched_wakeup": ("pid",),
    "sched_wakeup_new": ("pid",),
    "sched_process_fork": ("parent_pid", "child_pid"),
    "sched_process_exit": ("pid",),
    "sched_process_free": ("pid",),
    "task_newtask": ("pid",),
    "task_rename": ("pid",),
}

_COMPACT: dict[str, tuple[int, tuple[str, ...]]] = {
    "sched_switch": (COMPACT_SWITCH, ("prev_state", "next_pid", "next_prio", "next_comm")),
    "sched_waking": (COMPACT_WAKING, ("pid", "target_cpu", "prio", "comm", "common_flags")),
}


class FormatError(ProbesError):
    """A format file this parser cannot describe (the event is left disabled)."""


@dataclass(frozen=True)
class FormatField:
    """One `field:` line of a format file."""

    name: str
    kind: int | None  # KIND_*, or None: known but not recorded (arrays of numbers)
    offset: int
    size: int
    signed: bool


def _field(declaration: str, offset: int, size: int, signed: bool) -> FormatField:
    decl = declaration.strip()
    if decl.startswith("__data_loc"):
        name = decl.split()[-1]
        if name.endswith("[]"):
            name = name[:-2]
        element = decl[len("__data_loc") :].rsplit(None, 1)[0]
        if size != 4:
            raise FormatError(f"__data_loc field {name!r} of size {size}")
        return FormatField(name, KIND_DATA_LOC if "char" in element else None, offset, 4, signed)
    match = re.fullmatch(r"(.*?)\s*\b(\w+)\s*(\[[^\]]*\])?", decl)
    if match is None:
        raise FormatError(f"unreadable field {decl!r}")
    type_name, name, array = match.group(1), match.group(2), match.group(3)
    if array is not None:
        if re.search(r"\bchar\b", type_name) is None:
            return FormatField(name, None, offset, size, signed)
        return FormatField(name, KIND_TAIL if size == 0 else KIND_CHARS, offset, size, signed)
    if size not in (1, 2, 4, 8):
        raise FormatError(f"field {name!r} of type {type_name!r} has size {size}")
    return FormatField(name, KIND_INT, offset, size, signed)


def parse_format(text: str) -> tuple[int, list[FormatField]]:
    """The event id and the fields of an event's `format` file."""
    id_match = re.search(r"^ID:\s*(\d+)", text, re.MULTILINE)
    if id_match is None:
        raise FormatError("no ID line")
    fields = [
        _field(m.group(1), int(m.group(2)), int(m.group(3)), m.group(4) != "0")
        for m in _FIELD.finditer(text)
    ]
    by_name = {f.name: f for f in fields}
    common_type = by_name.get("common_type")
    if common_type is None or (common_type.offset, common_type.size) != (0, 2):
        raise FormatError("common_type is not the record's first 2 bytes")
    common_pid = by_name.get("common_pid")
    if common_pid is None or common_pid.size != 4:
        raise FormatError("no 4-byte common_pid")
    return int(id_match.group(1)), fields


def _name_field(tag: int, name: str) -> bytes:
    data = name.encode()
    return encode_varint(tag) + encode_varint(len(data)) + data


def event_layout(group: str, name: str, fields: list[FormatField]) -> EventLayout:
    """How the records of `group/name` (of `fields`, from parse_format) are written."""
    typed = _TYPED.get((group, name))
    message = typed[1] if typed is not None else ""
    own = [f for f in fields if not f.name.startswith("common_") and f.kind is not None]
    layouts: dict[str, FieldLayout] = {}
    for f in fields:
        if f.kind is None:
            continue
        tag = getattr(tags, f"{message}_{f.name}_TAG", 0) if typed is not None else 0
        is_string = f.kind != KIND_INT
        if tag and ((tag & 7) == WIRE_TYPE_LENGTH_DELIMITED) != is_string:
            tag = 0  # the kernel's type does not fit the message's: left out
        layouts[f.name] = FieldLayout(
            kind=f.kind,
            offset=f.offset,
            size=f.size,
            signed=f.signed,
            tag=tag,
            name_field=_name_field(tags.GenericFtraceEvent_Field_name_TAG, f.name),
        )
    no_compact: tuple[int, tuple[str, ...]] = (COMPACT_NONE, ())
    compact, compact_names = _COMPACT.get(name, no_compact) if group == "sched" else no_compact
    if any(n not in layouts for n in compact_names):
        compact = COMPACT_NONE
    min_size = max((f.offset + f.size for f in fields), default=0)
    return EventLayout(
        event_tag=(
            getattr(tags, f"FtraceEvent_{typed[0]}_TAG") if typed else tags.FtraceEvent_generic_TAG
        ),
        generic=typed is None,
        name_field=_name_field(tags.GenericFtraceEvent_event_name_TAG, name),
        fields=[layouts[f.name] for f in own],
        compact=compact,
        compact_fields=[layouts[n] for n in compact_names] if compact != COMPACT_NONE else [],
        pid_fields=[layouts[n] for n in _PID_FIELDS.get(name, ()) if n in layouts] if typed else [],
        min_size=min_size,
    )


def page_layout(header_page: str, header_event: str, common: list[FormatField]) -> PageLayout:
    """The page and record header layout of `events/header_page` and `events/header_event`,
    with the common fields of the events (`common` from any event's parse_format)."""
    page = {m.group(1).split()[-1]: m for m in _FIELD.finditer(header_page)}
    for needed in ("timestamp", "commit", "data"):
        if needed not in page:
            raise ProbesError(f"events/header_page: no {needed} field")
    if (int(page["timestamp"].group(2)), int(page["timestamp"].group(3))) != (0, 8):
        raise ProbesError("events/header_page: timestamp is not the page's first 8 bytes")
    types = {m.group(1): int(m.group(2)) for m in _TYPE_VALUE.finditer(header_event)}
    bits = {m.group(1): int(m.group(2)) for m in _BITS.finditer(header_event)}
    if bits.get("type_len") != 5 or bits.get("time_delta") != 27:
        raise ProbesError("events/header_event: not a 5-bit type_len and 27-bit time_delta")
    for needed in ("padding", "time_extend", "time_stamp"):
        if needed not in types:
            raise ProbesError(f"events/header_event: no {needed} type")
    by_name = {f.name: f for f in common}
    data_offset = int(page["data"].group(2))
    return PageLayout(
        page_size=data_offset + int(page["data"].group(3)),
        commit_offset=int(page["commit"].group(2)),
        commit_size=int(page["commit"].group(3)),
        data_offset=data_offset,
        type_padding=types["padding"],
        type_time_extend=types["time_extend"],
        type_time_stamp=types["time_stamp"],
        common_pid_offset=by_name["common_pid"].offset,
    )
