"""The heap profiles' part of the HTML report: each profile's flame tree as the page's arrays.

A tree is drawn from parallel arrays (frame, parent, unreleased bytes, bytes allocated,
allocations: totals with the callees'), biggest first by bytes allocated. At most
`MAX_HEAP_NODES` frames over all profiles; past that, a frame's remaining callees are one
"other" frame that keeps their totals.
"""

from __future__ import annotations

from typing import Any

from perfetto_client._tracer._heap_tree import (
    HeapNode,
    HeapProfile,
    HeapProfiles,
    read_heap_profiles,
)

__all__ = ["add_heaps", "heap_html_data"]

MAX_HEAP_NODES = 50_000
OTHER = "other"


def _label(profile: HeapProfile) -> str:
    return f"heap {profile.heap or '?'} of pid {profile.pid}"


def _flatten(root: HeapNode, budget: int) -> tuple[dict[str, Any], int]:
    """The tree's arrays, and how many call paths were folded into "other"."""
    folded = 0
    frames: dict[tuple[str, str], int] = {("", ""): 0, (OTHER, ""): 1}
    out: dict[str, list[int]] = {
        "n": [0],
        "p": [-1],
        "u": [root.unreleased],
        "a": [root.allocated],
        "c": [root.count],
    }
    todo = [(root, 0)]
    while todo:
        node, at = todo.pop()
        other = HeapNode(OTHER, "")
        for child in sorted(node.children.values(), key=lambda c: -c.allocated):
            if len(out["n"]) >= budget:
                folded += 1
                other.unreleased += child.unreleased
                other.allocated += child.allocated
                other.count += child.count
                continue
            out["n"].append(frames.setdefault((child.name, child.location), len(frames)))
            out["p"].append(at)
            out["u"].append(child.unreleased)
            out["a"].append(child.allocated)
            out["c"].append(child.count)
            todo.append((child, len(out["n"]) - 1))
        if other.allocated or other.count:
            out["n"].append(1)
            out["p"].append(at)
            out["u"].append(other.unreleased)
            out["a"].append(other.allocated)
            out["c"].append(other.count)
    return {"frames": [list(key) for key in frames], **out}, folded


def heap_html_data(heaps: HeapProfiles) -> dict[str, Any]:
    """The page's `heaps` (one entry per profile, biggest unreleased first) and the lines that
    say what they lack or fold."""
    profiles = sorted(heaps.profiles.values(), key=lambda p: (-p.root.unreleased, p.pid, p.heap))
    budget = MAX_HEAP_NODES
    out = []
    folded = 0
    for profile in profiles:
        tree, cut = _flatten(profile.root, max(100, budget))
        budget -= len(tree["n"])
        folded += cut
        out.append(
            {
                "label": _label(profile),
                "pid": profile.pid,
                "heap": profile.heap,
                "interval": profile.sampling_interval,
                "dumps": profile.dumps,
                "callstacks": profile.callstacks,
                "complete": profile.complete,
                "tree": tree,
            }
        )
    notes = [f"heap profiles: {line}" for line in heaps.notes()]
    lines = [
        f"{folded:,} heap call paths past the first {MAX_HEAP_NODES:,} frames are drawn as"
        " 'other' under their callers"
    ]
    return {"heaps": out, "incomplete": notes, "folded": lines if folded else []}


def add_heaps(data: dict[str, Any], path: str) -> None:
    """Adds the heap profiles of the trace at `path` to the page's `data`: their trees, what
    they lack (in the incomplete box) and fold, and their totals after the summary."""
    heaps = read_heap_profiles(path)
    if not heaps.profiles:
        return
    more = heap_html_data(heaps)
    data["heaps"] = more["heaps"]
    data["incomplete"] += more["incomplete"]
    data["folded"] += more["folded"]
    pids = len({p.pid for p in heaps.profiles.values()})
    unreleased = sum(p.root.unreleased for p in heaps.profiles.values())
    data["summary"] += (
        f"; heap profiles of {len(heaps.profiles)} heap{'' if len(heaps.profiles) == 1 else 's'}"
        f" in {pids} process{'' if pids == 1 else 'es'}: {unreleased:,} bytes unreleased"
    )
