"""`perfetto-trace report FILE`: the top functions by total and self time, and the slowest calls.

Read from the trace itself (`_slices.SliceReader`, no trace_processor), in chunks, so memory
stays bounded by the chunk size and the number of functions. The JSON form's schema is in
docs/perfetto-trace.md.
"""

from __future__ import annotations

import json
from typing import Any, TextIO

from perfetto_service import TraceFileError, read_trace_file

from perfetto_client._tracer._heap_tree import format_heaps, heap_json, read_heap_profiles
from perfetto_client._tracer._slices import Function, SliceReader

__all__ = [
    "ReportError",
    "format_report",
    "print_report",
    "read_trace",
    "report_json",
    "report_notes",
]


class ReportError(Exception):
    """The trace cannot be reported on; the message is the one line to print."""


def read_trace(path: str, limit: int) -> SliceReader:
    """Decodes the trace at `path`, keeping the `limit` slowest calls.

    The file's verdicts (unreadable, not a trace, corrupt) are `perfetto_service`'s, which
    `perfetto --summary` gives too; a truncated trace is refused as well.
    """
    reader = SliceReader(limit)
    try:
        end = read_trace_file(path, lambda data, base: reader.feed(data, 0, len(data), base))
    except TraceFileError as exc:
        raise ReportError(str(exc)) from None
    if end.truncated_at is not None:
        raise ReportError(
            f"{path} is truncated: the packet at offset {end.truncated_at} ends past the end "
            f"of the file ({end.truncated_bytes} bytes of it are there)"
        )
    return reader


def _thread(reader: SliceReader, uuid: int) -> tuple[int, int, str]:
    return reader.threads.get(uuid, (0, 0, f"track {uuid}"))


def _function_json(func: Function) -> dict[str, Any]:
    return {
        "name": func.name,
        "location": func.location,
        "calls": func.calls,
        "total_ns": func.total_ns,
        "self_ns": func.self_ns,
        "max_ns": func.max_ns,
    }


def report_json(path: str, reader: SliceReader, limit: int) -> dict[str, Any]:
    """The report as the JSON object `--json` prints."""
    functions = [f for f in reader.functions.values() if f.calls]
    start = max(reader.first_ns, 0)
    slowest = []
    for duration, _, begin, name, uuid in sorted(reader.slowest, reverse=True):
        pid, tid, thread = _thread(reader, uuid)
        slowest.append(
            {
                "name": name,
                "duration_ns": duration,
                "start_ns": begin - start,
                "pid": pid,
                "tid": tid,
                "thread": thread,
            }
        )
    return {
        "trace": path,
        "calls": reader.calls,
        "threads": len({track.uuid for track in reader.stacks if track.frames}),
        "functions": len(functions),
        "span_ns": max(0, reader.last_ns - start),
        "functions_by_total": [
            _function_json(f) for f in sorted(functions, key=lambda f: -f.total_ns)[:limit]
        ],
        "functions_by_self": [
            _function_json(f) for f in sorted(functions, key=lambda f: -f.self_ns)[:limit]
        ],
        "slowest_calls": slowest,
        "unfinished_calls": reader.open_slices(),
        "ends_without_begin": reader.unmatched_ends,
        "events_without_clock": reader.unclocked,
        "names_not_interned": reader.unnamed,
        "packets_after_loss": reader.packets_after_loss,
    }


def _ms(ns: int) -> str:
    return f"{ns / 1e6:,.3f}"


def _function_rows(title: str, functions: list[dict[str, Any]]) -> list[str]:
    rows = [
        "",
        title,
        f"{'CALLS':>12} {'TOTAL ms':>12} {'SELF ms':>12} {'MAX ms':>11}  FUNCTION",
    ]
    for f in functions:
        where = f"  ({f['location']})" if f["location"] else ""
        rows.append(
            f"{f['calls']:>12,} {_ms(f['total_ns']):>12} {_ms(f['self_ns']):>12} "
            f"{_ms(f['max_ns']):>11}  {f['name']}{where}"
        )
    return rows


def format_report(report: dict[str, Any], limit: int) -> str:
    """The report as `perfetto-trace report` prints it."""
    threads = report["threads"]
    out = [
        f"{report['trace']}: {report['calls']:,} calls on {threads} "
        f"thread{'' if threads == 1 else 's'}, spanning {report['span_ns'] / 1e9:.3f} s",
    ]
    more = report["functions"] - len(report["functions_by_total"])
    rest = [f"{'':>12} ... {more:,} more functions"] if more > 0 else []
    out += _function_rows(f"Functions by total time (top {limit}):", report["functions_by_total"])
    out += rest
    out += _function_rows(f"Functions by self time (top {limit}):", report["functions_by_self"])
    out += rest
    out += ["", f"Slowest calls (top {limit}):"]
    out.append(f"{'DURATION ms':>12} {'START s':>10}  {'THREAD':<24} FUNCTION")
    for call in report["slowest_calls"]:
        thread = f"{call['thread']} ({call['tid']})" if call["tid"] else call["thread"]
        out.append(
            f"{_ms(call['duration_ns']):>12} {call['start_ns'] / 1e9:>10.6f}  {thread:<24} "
            f"{call['name']}"
        )
    lines = report_notes(report)
    if lines:
        out += ["", *lines]
    return "\n".join(out) + "\n"


_NOTES = (
    (
        "unfinished_calls",
        "calls had not returned when the trace ended (the program was stopped?): "
        "they are not counted above",
    ),
    ("ends_without_begin", "returns without their call (the trace lost its beginning)"),
    ("events_without_clock", "events on a clock never set by a clock snapshot: left out"),
    ("names_not_interned", "calls whose name was never interned"),
    ("packets_after_loss", "packets follow data lost on their sequence"),
)


def report_notes(report: dict[str, Any]) -> list[str]:
    """The lines that say what the trace lacks or what did not fit, as the report prints them."""
    return [f"{report[key]:,} {text}" for key, text in _NOTES if report[key]]


def print_report(path: str, limit: int, as_json: bool, out: TextIO) -> None:
    """Reads the trace at `path` and prints its report to `out` (raises `ReportError`)."""
    report = report_json(path, read_trace(path, limit), limit)
    heaps = read_heap_profiles(path)
    report["heap_profiles"] = heap_json(heaps)
    report["heap_profile_notes"] = heaps.notes()
    if as_json:
        json.dump(report, out, indent=2)
        out.write("\n")
    else:
        text = format_report(report, limit)
        if heaps.profiles or heaps.notes():
            if not report["calls"] and heaps.profiles:  # a heap profile alone: no call tables
                text = text.splitlines()[0] + "\n"
            text += "\n".join(format_heaps(report["heap_profiles"], heaps.notes())) + "\n"
        out.write(text)
