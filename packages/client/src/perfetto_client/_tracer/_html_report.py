"""`perfetto-trace report --html OUT.html FILE`: the trace as one self-contained HTML page.

A flame graph (icicle) of the calls aggregated by call path (and per test of a pytest run), a
timeline of each stack's top-level slices, of the program's instant events and of its
counters, the text report's top functions (sortable) and the lines that say what the trace
lacks. The data are aggregated (`_call_tree`, the report's own decoding) and capped, so the
page's size does not grow with the number of events: at most `MAX_NAMES` function names (the
rest are one "other"), `MAX_NODES` call paths (those under `MIN_SHARE` of their stack's time or
past the budget are folded into an "other" frame under their caller) and `TIMELINE_BINS`
columns per stack, instant track and counter in the timeline. The page's script, style and
markup are package data (`_html/`); nothing is fetched from the network.
"""

from __future__ import annotations

import json
from importlib.resources import files
from typing import Any

from perfetto_client._tracer._call_tree import (
    MAX_MARKS,
    MAX_TOP_SLICES,
    CallNode,
    CallTree,
    Counter,
    read_call_tree,
)
from perfetto_client._tracer._html_heap import add_heaps
from perfetto_client._tracer._report import format_report, report_json, report_notes
from perfetto_client._tracer._slices import Function

__all__ = ["html_page", "write_html_report"]

MAX_NAMES = 5000
MAX_NODES = 50_000
MIN_SHARE = 1e-5
TIMELINE_BINS = 2000
OTHER = "other"


class _Names:
    """The page's table of function names: index 0 is "other", then the kept ones."""

    def __init__(self, functions: list[Function]) -> None:
        kept = sorted(functions, key=lambda f: -f.total_ns)[:MAX_NAMES]
        self.index = {f: i + 1 for i, f in enumerate(kept)}
        self.names = [OTHER] + [f.name for f in kept]
        self.locations = [""] + [f.location for f in kept]
        self.folded = max(0, len(functions) - len(kept))

    def of(self, func: Function | None) -> int:
        return 0 if func is None else self.index.get(func, 0)


def _flatten(root: CallNode, names: _Names, budget: int) -> dict[str, list[int]]:
    """The call tree as parallel arrays (name, parent, calls, total, self), biggest first."""
    out: dict[str, list[int]] = {"n": [0], "p": [-1], "c": [0], "t": [root.total_ns], "s": [0]}
    min_ns = max(1, int(root.total_ns * MIN_SHARE))
    todo = [(root, 0)]
    while todo:
        node, at = todo.pop()
        children = sorted(node.children.values(), key=lambda c: -c.total_ns)
        out["s"][at] = node.total_ns - sum(c.total_ns for c in children) if at else 0
        other_calls = other_ns = 0
        for child in children:
            name = names.of(child.func)
            if name == 0 or child.total_ns < min_ns or len(out["n"]) >= budget:
                other_calls += child.calls
                other_ns += child.total_ns
                continue
            out["n"].append(name)
            out["p"].append(at)
            out["c"].append(child.calls)
            out["t"].append(child.total_ns)
            out["s"].append(0)
            todo.append((child, len(out["n"]) - 1))
        if other_ns:
            out["n"].append(0)
            out["p"].append(at)
            out["c"].append(other_calls)
            out["t"].append(other_ns)
            out["s"].append(other_ns)
    return out


def _timeline(
    slices: list[tuple[int, int, Function]], start: int, span: int, names: _Names
) -> list[list[int]]:
    """[begin, duration, name, calls] rows: the slices wider than a bin as they are, the
    others summed per bin (named after the longest one in it)."""
    width = max(1, span // TIMELINE_BINS)
    rows: list[list[int]] = []
    bins: dict[int, list[int]] = {}
    for begin, duration, func in slices:
        at = begin - start
        if duration >= width:
            rows.append([at, duration, names.of(func), 1])
            continue
        cell = bins.get(at // width)
        if cell is None:
            bins[at // width] = [at, duration, names.of(func), 1, duration]
            continue
        cell[1] += duration
        cell[3] += 1
        if duration > cell[4]:
            cell[2], cell[4] = names.of(func), duration
    rows += [cell[:4] for cell in bins.values()]
    rows.sort()
    return rows


def _instants(marks: list[tuple[int, str]], start: int, span: int) -> list[list[Any]]:
    """[at, name, count] rows: the first instant of each timeline column and how many it has."""
    width = max(1, span // TIMELINE_BINS)
    cells: dict[int, list[Any]] = {}
    for ts, name in marks:
        at = ts - start
        cell = cells.get(at // width)
        if cell is None:
            cells[at // width] = [at, name, 1]
        else:
            cell[2] += 1
    return sorted(cells.values())


def _counter_points(counter: Counter, start: int, span: int) -> list[list[float]]:
    """[at, value] rows: per timeline column its lowest, highest and last values, in time
    order (a step chart of them keeps the extremes and where each column ends)."""
    width = max(1, span // TIMELINE_BINS)
    cells: dict[int, list[tuple[int, float]]] = {}
    for ts, value in counter.points:
        point = (ts - start, value)
        cell = cells.get(point[0] // width)
        if cell is None:
            cells[point[0] // width] = [point, point, point]
            continue
        if value < cell[0][1]:
            cell[0] = point
        if value > cell[1][1]:
            cell[1] = point
        cell[2] = point
    return [list(p) for p in sorted({p for cell in cells.values() for p in cell})]


def _track_label(tree: CallTree, uuid: int) -> str:
    """A track's name: its descriptor's, or its thread's."""
    name: str = tree.reader.track_names.get(uuid, "")
    if name:
        return name
    _, tid, thread = tree.reader.threads.get(uuid, (0, 0, f"track {uuid}"))
    return f"{thread or 'thread'} ({tid})" if tid else thread


def _marks_data(tree: CallTree, start: int, span: int) -> dict[str, Any]:
    """The timeline's lanes of instant events and counters, and the line on what was left out."""
    instants = [
        {
            "label": _track_label(tree, uuid),
            "count": len(marks),
            "ticks": _instants(marks, start, span),
        }
        for uuid, marks in tree.instants.items()
    ]
    counters = [
        {
            "label": _track_label(tree, uuid),
            "count": counter.count,
            "min": counter.low,
            "max": counter.high,
            "points": _counter_points(counter, start, span),
        }
        for uuid, counter in tree.counters.items()
    ]
    folded = []
    if tree.marks_dropped:
        folded.append(
            f"{tree.marks_dropped:,} instants and counter values past the first {MAX_MARKS:,} "
            "are not in the timeline (each counter's min and max count them)"
        )
    return {"instants": instants, "counters": counters, "folded": folded}


def _segments_data(tree: CallTree, names: _Names) -> tuple[list[dict[str, Any]], list[str]]:
    """Each segment's (a pytest run's test's) calls as a flame graph, by name; the line on
    the segments whose calls the file holds before their begin (their graphs lack them).
    None when no calls were recorded (a test run without `--perfetto-calls`)."""
    out: list[dict[str, Any]] = []
    budget = MAX_NODES
    if not any(root.children for root in tree.segments.values()):
        return out, []
    for func, root in sorted(tree.segments.items(), key=lambda item: item[0].name):
        flat = _flatten(root, names, max(100, budget))
        budget -= len(flat["n"])
        out.append({"label": func.name, "tree": flat})
    lines = []
    if tree.late_segments:
        lines.append(
            f"{tree.late_segments:,} tests begin in the file after calls made during them: "
            "their flame graphs lack those calls"
        )
    return out, lines


def _stack_label(tree: CallTree, uuid: int, seen: dict[int, int]) -> str:
    pid, tid, name = tree.reader.threads.get(uuid, (0, 0, f"track {uuid}"))
    label = f"{name or 'thread'} ({tid})" if tid else name
    if pid and tid and pid != tid:
        label += f" pid {pid}"
    seen[uuid] = seen.get(uuid, 0) + 1
    return label if seen[uuid] == 1 else f"{label} #{seen[uuid]}"


def html_data(path: str, tree: CallTree, truncated: str, limit: int) -> dict[str, Any]:
    """What the page shows, as the JSON object its script reads."""
    reader = tree.reader
    report = report_json(path, reader, limit)
    names = _Names([f for f in reader.functions.values() if f.calls])
    firsts = [t for t in (reader.first_ns, tree.first_mark) if t >= 0]
    start = min(firsts, default=0)
    span = max(reader.last_ns, tree.last_mark, start) - start
    marks = _marks_data(tree, start, span)
    notes = ([truncated] if truncated else []) + report_notes(report)
    folded = []
    if names.folded:
        folded.append(
            f"{names.folded:,} functions beyond the {MAX_NAMES:,} longest are drawn as 'other'"
        )
    if tree.folded_calls:
        folded.append(
            f"{tree.folded_calls:,} calls (with their callees) on call paths past the first "
            f"{tree.max_paths:,} are drawn as 'other' under their callers"
        )
    if tree.top_slices_dropped:
        folded.append(
            f"{tree.top_slices_dropped:,} top-level calls past the first "
            f"{MAX_TOP_SLICES:,} are not in the timeline"
        )
    folded += marks["folded"]
    segments, late = _segments_data(tree, names)
    stacks = []
    budget = MAX_NODES
    seen: dict[int, int] = {}
    for mirror in tree.mirrors:
        root = mirror.root
        root.total_ns = sum(c.total_ns for c in root.children.values())
        slices = tree.top_slices[mirror.track.key]
        if not root.total_ns and not slices:
            continue
        flat = _flatten(root, names, len(mirror.nodes) + budget)
        budget = max(1000, budget - len(flat["n"]))
        stacks.append(
            {
                "label": _stack_label(tree, mirror.track.uuid, seen),
                "tree": flat,
                "timeline": _timeline(slices, start, span, names),
            }
        )
    return {
        "trace": path,
        "summary": format_report(report, 0).splitlines()[0],
        "span_ns": span,
        "segments": segments,
        "instants": marks["instants"],
        "counters": marks["counters"],
        "incomplete": notes + late,
        "folded": folded,
        "names": names.names,
        "locations": names.locations,
        "stacks": stacks,
        "functions": report["functions_by_total"],
        "functions_count": report["functions"],
    }


def html_page(data: dict[str, Any]) -> str:
    """The page: the template with its style, script and data put inline."""
    here = files("perfetto_client._tracer") / "_html"
    page = (here / "report.html").read_text("utf-8")
    # "</" cannot end the script element that holds the data: JSON lets it be "<\/".
    payload = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")
    return (
        page.replace("/*STYLE*/", (here / "report.css").read_text("utf-8"))
        .replace("/*SCRIPT*/", (here / "report.js").read_text("utf-8"))
        .replace("/*TITLE*/", _escape(data["trace"]))
        .replace("/*DATA*/", payload)
    )


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def write_html_report(
    path: str, out: str, limit: int, lacks: list[str], segments: frozenset[str] = frozenset()
) -> tuple[list[str], list[str], bool]:
    """Writes the page of the trace at `path` to `out`, with `lacks` (what the recording
    said it lost) first in its incomplete box and a flame graph of the calls during each
    top-level slice named in `segments` (a pytest run's tests); returns the box's lines, the
    page's notes on what it folded, and whether the file is truncated. Raises `ReportError`
    when the file is not a trace (nothing is written)."""
    tree, truncated = read_call_tree(path, limit, segments=segments)
    data = html_data(path, tree, truncated, limit)
    data["incomplete"] = lacks + data["incomplete"]
    add_heaps(data, path)
    page = html_page(data)
    with open(out, "w", encoding="utf-8") as file:
        file.write(page)
    return list(data["incomplete"]), list(data["folded"]), bool(truncated)
