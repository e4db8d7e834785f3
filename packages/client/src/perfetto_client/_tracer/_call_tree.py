"""The calls of a trace aggregated by call path (a flame graph's data), its top-level slices,
instant events and counter values (a timeline's).

Told by the text report's own `SliceReader` as it decodes (a `SliceObserver`: one pass), so the
paths, the report's tables and its counts of what did not fit all come from the same decoding.

Given the names of some top-level slices (`segments`: a pytest run's tests), the calls that
begin during one of them on its thread, with their callees, also make a tree of their own per
name. That needs the segment's begin decoded before the calls inside it (a file written in
time order, as `pytest --perfetto` writes its tests); a segment whose begin comes after calls
that began inside it is counted (`late_segments`).
"""

from __future__ import annotations

try:
    import cython
except ImportError:  # installed without Cython: runs as pure Python
    from protozero import _cython_shim as cython

from bisect import bisect_right, insort
from operator import itemgetter

from perfetto_service import TraceFileError, read_trace_file

from perfetto_client._tracer._report import ReportError

if not cython.compiled:  # (first: what mypy reads)
    from perfetto_client._tracer._slices import (
        Frame,
        Function,
        SliceObserver,
        SliceReader,
        Track,
    )
else:
    from cython.cimports.perfetto_client._tracer._slices import (  # type: ignore[no-redef]
        Frame,
        Function,
        SliceObserver,
        SliceReader,
        Track,
    )

__all__ = ["CallNode", "CallTree", "Counter", "read_call_tree"]

# Top-level slices kept for the timeline, over all stacks; those past it are counted.
MAX_TOP_SLICES = 200_000
# Call paths made, over all stacks; a new path past it is folded into its caller's "other".
MAX_PATHS = 300_000
# Instants and counter values kept for the timeline, over all tracks; those past it are counted.
MAX_MARKS = 200_000
_BEGIN = itemgetter(0)


class CallNode:
    """The ended calls of one function at one call path: their count and total time (ns)."""

    def __init__(self, func: Function | None) -> None:
        self.func = func
        self.calls = 0
        self.total_ns = 0
        self.children: dict[Function | None, CallNode] = {}
        self.other: CallNode | None = None  # the paths below it that were folded


def _other(node: CallNode) -> CallNode:
    """Where the new paths below `node` go once `MAX_PATHS` were made: one node with no
    function (drawn as "other"), whose own callees are itself."""
    if node.other is None:
        node.other = CallNode(None)
        node.other.other = node.other
        node.children[None] = node.other
    return node.other


class _Mirror:
    """What is known of one of the reader's stacks: the nodes of its open slices."""

    def __init__(self, track: Track) -> None:
        self.track = track
        self.root = CallNode(None)
        self.nodes = [self.root]
        # per depth: the node in a segment's tree of the open slice there, or None
        self.in_segment: list[CallNode | None] = [None]


class Counter:
    """A counter track's values: all of them counted, the first `MAX_MARKS` (over all tracks)
    kept as `(ts, value)`."""

    def __init__(self) -> None:
        self.points: list[tuple[int, float]] = []
        self.count = 0
        self.low = float("inf")
        self.high = float("-inf")


class CallTree(SliceObserver):
    """A `SliceReader` and, per stack (a track and sequence), its calls by path and its
    top-level slices `(begin ns, duration ns, function)`; per track, its instants
    `(ts, name)` and its counter's values."""

    def __init__(
        self, limit: int, max_paths: int = MAX_PATHS, segments: frozenset[str] = frozenset()
    ) -> None:
        self.reader = SliceReader(limit)
        self.reader.observer = self
        self.max_paths = max_paths
        self.mirrors: list[_Mirror] = []
        self.top_slices: list[list[tuple[int, int, Function]]] = []
        self.top_slices_dropped = 0
        self.folded_calls = 0  # calls that began a path past MAX_PATHS
        self.instants: dict[int, list[tuple[int, str]]] = {}
        self.counters: dict[int, Counter] = {}
        self.marks_dropped = 0
        self.first_mark = -1
        self.last_mark = 0
        self.segment_names = segments
        self.segments: dict[Function, CallNode] = {}  # a segment's name -> its calls' tree
        self.late_segments = 0
        # per thread track: its segments' (begin, end, tree, stack) in time order, the open one
        self._closed: dict[int, list[tuple[int, int, CallNode, int]]] = {}
        self._open: dict[int, tuple[int, int, CallNode, int]] = {}
        self._outside: dict[int, int] = {}  # the latest begin of a call in no segment
        self._kept = 0
        self._marks = 0
        self._paths = 0

    def feed(self, data: bytes, base: int) -> int:
        """Decodes the whole packets of `data` (file offset `base`); returns where the first
        incomplete one starts."""
        return self.reader.feed(data, 0, len(data), base)

    def _mirror(self, track: Track) -> _Mirror:
        stacks = self.reader.stacks
        while len(self.mirrors) <= track.key:
            self.mirrors.append(_Mirror(stacks[len(self.mirrors)]))
            self.top_slices.append([])
        return self.mirrors[track.key]

    def _child(self, parent: CallNode, func: Function) -> CallNode:
        """The node of `func` called from `parent` (made, or folded past `max_paths`)."""
        if parent.other is parent:
            return parent
        found = parent.children.get(func)
        if found is not None:
            return found
        if self._paths < self.max_paths:
            self._paths += 1
            node = parent.children[func] = CallNode(func)
            return node
        self.folded_calls += 1
        return _other(parent)

    def began(self, track: Track, frame: Frame) -> None:
        mirror = self._mirror(track)
        depth = track.depth
        func = frame.func
        node = self._child(mirror.nodes[depth - 1], func)
        if len(mirror.nodes) > depth:
            mirror.nodes[depth] = node
        else:
            mirror.nodes.append(node)
            mirror.in_segment.append(None)
        if not self.segment_names:
            return
        if depth == 1 and func.name in self.segment_names:
            self._open_segment(track, frame)
        parent = mirror.in_segment[depth - 1]
        if parent is None:
            parent = self._segment_at(track, frame.begin)
        mirror.in_segment[depth] = None if parent is None else self._child(parent, func)

    def _open_segment(self, track: Track, frame: Frame) -> None:
        tree = self.segments.get(frame.func)
        if tree is None:
            tree = self.segments[frame.func] = CallNode(frame.func)
        self._open[track.uuid] = (frame.begin, 0, tree, track.key)
        if self._outside.get(track.uuid, -1) > frame.begin:
            self.late_segments += 1

    def _segment_at(self, track: Track, ts: int) -> CallNode | None:
        """The tree of the segment on `track`'s thread that holds `ts`, if any (a segment
        holds the calls of the other stacks, not its own slices)."""
        uuid = track.uuid
        found = self._open.get(uuid)
        if found is not None and found[0] <= ts:
            return None if found[3] == track.key else found[2]
        closed = self._closed.get(uuid)
        if closed:
            at = bisect_right(closed, ts, key=_BEGIN) - 1
            if at >= 0 and closed[at][1] >= ts:
                return None if closed[at][3] == track.key else closed[at][2]
        self._outside[uuid] = max(self._outside.get(uuid, -1), ts)
        return None

    def ended(self, track: Track, frame: Frame, duration: int) -> None:
        mirror = self._mirror(track)
        depth = track.depth
        node = mirror.nodes[depth + 1]
        if node.other is not node or mirror.nodes[depth] is not node:
            # (a call folded into the same "other" as its caller is inside its time)
            node.calls += 1
            node.total_ns += duration
        if self.segment_names:
            self._segment_ended(track, mirror, frame, duration)
        if depth == 0:
            if self._kept < MAX_TOP_SLICES:
                self._kept += 1
                self.top_slices[track.key].append((frame.begin, duration, frame.func))
            else:
                self.top_slices_dropped += 1

    def _segment_ended(self, track: Track, mirror: _Mirror, frame: Frame, duration: int) -> None:
        depth = track.depth
        node = mirror.in_segment[depth + 1]
        if node is not None:
            mirror.in_segment[depth + 1] = None
            if node.other is not node or mirror.in_segment[depth] is not node:
                node.calls += 1
                node.total_ns += duration
        if depth == 0 and frame.func.name in self.segment_names:
            opened = self._open.get(track.uuid)
            if opened is not None and opened[3] == track.key:
                del self._open[track.uuid]
                tree = opened[2]
                tree.calls += 1
                tree.total_ns += duration
                closed = self._closed.setdefault(track.uuid, [])
                insort(closed, (opened[0], opened[0] + duration, tree, track.key), key=_BEGIN)

    def _mark(self, ts: int) -> bool:
        """Counts a mark at `ts`; whether it is kept."""
        if self.first_mark < 0 or ts < self.first_mark:
            self.first_mark = ts
        self.last_mark = max(self.last_mark, ts)
        if self._marks < MAX_MARKS:
            self._marks += 1
            return True
        self.marks_dropped += 1
        return False

    def instant(self, uuid: int, ts: int, func: Function) -> None:
        marks = self.instants.get(uuid)
        if marks is None:
            marks = self.instants[uuid] = []
        if self._mark(ts):
            marks.append((ts, func.name))

    def counter(self, uuid: int, ts: int, value: float) -> None:
        found = self.counters.get(uuid)
        if found is None:
            found = self.counters[uuid] = Counter()
        found.count += 1
        found.low = min(found.low, value)
        found.high = max(found.high, value)
        if self._mark(ts):
            found.points.append((ts, value))


def read_call_tree(
    path: str, limit: int, max_paths: int = MAX_PATHS, segments: frozenset[str] = frozenset()
) -> tuple[CallTree, str]:
    """Decodes the trace at `path` (with a tree per segment named in `segments`); returns its
    call tree and, when the file is truncated, the line that says so (what came before the cut
    is decoded, not thrown away)."""
    tree = CallTree(limit, max_paths, segments)
    try:
        end = read_trace_file(path, tree.feed)
    except TraceFileError as exc:
        raise ReportError(str(exc)) from None
    if end.truncated_at is None:
        return tree, ""
    return tree, (
        f"{path} is truncated: the packet at offset {end.truncated_at} ends past the end of "
        f"the file ({end.truncated_bytes} bytes of it are there); this is what came before it"
    )
