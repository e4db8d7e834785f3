"""The calls of a trace aggregated by call path (a flame graph's data) and its top-level slices.

Decoded by the text report's own `SliceReader`, fed one packet at a time: after each packet
the stack that moved (one track event per packet at most) says which slice began or ended,
so the paths, the report's tables and its counts of what did not fit all come from the same
decoding. A slice's duration is what its end added to its function's self time plus the time
of the slices directly inside it (`Frame.children_ns`).
"""

from __future__ import annotations

try:
    import cython
except ImportError:  # installed without Cython: runs as pure Python
    from protozero import _cython_shim as cython

from perfetto_service import TraceFileError, read_trace_file

from perfetto_client._tracer._report import ReportError

if cython.compiled:
    from cython.cimports.perfetto_client._tracer._slices import (
        Frame,
        Function,
        SliceReader,
        Track,
    )
else:
    from perfetto_client._tracer._slices import Frame, Function, SliceReader, Track

__all__ = ["CallNode", "CallTree", "read_call_tree"]

# Top-level slices kept for the timeline, over all stacks; those past it are counted.
MAX_TOP_SLICES = 200_000
# Call paths made, over all stacks; a new path past it is folded into its caller's "other".
MAX_PATHS = 300_000


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
        self.depth = 0


class CallTree:
    """A `SliceReader` and, per stack (a track and sequence), its calls by path and its
    top-level slices `(begin ns, duration ns, function)`."""

    def __init__(self, limit: int, max_paths: int = MAX_PATHS) -> None:
        self.reader = SliceReader(limit)
        self.max_paths = max_paths
        self.mirrors: list[_Mirror] = []
        self.top_slices: list[list[tuple[int, int, Function]]] = []
        self.top_slices_dropped = 0
        self.folded_calls = 0  # calls that began a path past MAX_PATHS
        self._kept = 0
        self._last: _Mirror | None = None
        self._self_seen: dict[Function, int] = {}
        self._at = 0
        self._paths = 0

    def feed(self, data: bytes, base: int) -> int:
        """Decodes the whole packets of `data` (file offset `base`); returns where the first
        incomplete one starts."""
        buf = data
        end = len(data)
        pos = 0
        reader = self.reader
        while pos < end:
            tag = self._varint(buf, pos, end)
            at = self._at
            if at < 0:
                return pos
            stop = at
            wire_type = tag & 7
            if wire_type in {0, 2}:
                value = self._varint(buf, at, end)
                stop = self._at
                if stop < 0:
                    return pos
                if wire_type == 2:
                    if value > end - stop:
                        return pos
                    stop += value
            else:  # not a Trace field: the reader says so
                stop = end
            if reader.feed(data, pos, stop, base) != stop:
                return pos
            self._moved()
            pos = stop
        return pos

    def _varint(self, buf: bytes, pos: int, end: int) -> int:
        """The varint at `pos`; `_at` is where it ends, or -1 when it runs past `end`."""
        value = 0
        shift = 0
        while pos < end and shift < 64:
            byte = buf[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                self._at = pos
                return value
            shift += 7
        self._at = -1
        return 0

    def _moved(self) -> None:
        last = self._last
        if last is not None and last.track.depth != last.depth:
            self._follow(last)
            return
        stacks = self.reader.stacks
        while len(self.mirrors) < len(stacks):
            self.mirrors.append(_Mirror(stacks[len(self.mirrors)]))
            self.top_slices.append([])
        for mirror in self.mirrors:
            if mirror.track.depth != mirror.depth:
                self._last = mirror
                self._follow(mirror)
                return

    def _follow(self, mirror: _Mirror) -> None:
        track = mirror.track
        depth = track.depth
        if depth > mirror.depth:  # a slice began
            parent = mirror.nodes[mirror.depth]
            func = track.frames[depth - 1].func
            if parent.other is parent:
                node = parent
            else:
                found = parent.children.get(func)
                if found is not None:
                    node = found
                elif self._paths < self.max_paths:
                    self._paths += 1
                    node = parent.children[func] = CallNode(func)
                else:
                    self.folded_calls += 1
                    node = _other(parent)
            if len(mirror.nodes) > depth:
                mirror.nodes[depth] = node
            else:
                mirror.nodes.append(node)
        else:  # a slice ended
            frame: Frame = track.frames[depth]
            func = frame.func
            seen = self._self_seen.get(func, 0)
            self._self_seen[func] = func.self_ns
            duration = func.self_ns - seen + frame.children_ns
            node = mirror.nodes[mirror.depth]
            if node.other is not node or mirror.nodes[depth] is not node:
                # (a call folded into the same "other" as its caller is inside its time)
                node.calls += 1
                node.total_ns += duration
            if depth == 0:
                if self._kept < MAX_TOP_SLICES:
                    self._kept += 1
                    self.top_slices[track.key].append((frame.begin, duration, func))
                else:
                    self.top_slices_dropped += 1
        mirror.depth = depth


def read_call_tree(path: str, limit: int, max_paths: int = MAX_PATHS) -> tuple[CallTree, str]:
    """Decodes the trace at `path`; returns its call tree and, when the file is truncated,
    the line that says so (what came before the cut is decoded, not thrown away)."""
    tree = CallTree(limit, max_paths)
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
