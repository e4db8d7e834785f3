"""The tracks of asyncio tasks, and what `@trace` makes of a coroutine function.

A coroutine function's slices, and events recorded inside a task with no `track=`, go on
the running task's track, so they survive awaits; a task that ends its last slice sends a
flow to each task awaiting it. Never compiled: it subclasses `NamedTrack` in Python.
"""

from __future__ import annotations

import functools
import itertools
import sys
import weakref
from collections.abc import Callable, Coroutine
from typing import Any

from perfetto_client._categories import Category
from perfetto_client._track_event import now, thread_writers, write_event
from perfetto_client._track_event_writer import TYPE_SLICE_BEGIN, TYPE_SLICE_END, flow_fields
from perfetto_client._tracks import NamedTrack, process_uuid

__all__ = ["task_track", "traced_coroutine"]

_AWAIT_FLOW_BASE = 0x5A5A << 48
"""Flow ids between asyncio tasks: a range of their own in the process's flow id space."""


class _TaskTrack(NamedTrack):
    """The track of one asyncio task.

    It counts the task's open slices. When the last one ends, each task awaiting this one
    (directly or through `asyncio.gather`) gets a flow from that slice to the slice it was
    awaiting in (its innermost open slice, when that ends), or to its next event.
    """

    def __init__(self, task: Any) -> None:
        super().__init__(f"task {task.get_name()}", id(task))
        self.task = weakref.ref(task)
        self.open_slices = 0
        self.arriving: dict[int, list[int]] = {}
        """Flow ids this task terminates, by the depth of the slice they end in (0: the
        next event)."""

    def event_fields(self, event_type: int) -> bytes:
        """The track field of an event of `event_type` on this track, with its flows."""
        out = self.uuid_field
        depth = self.open_slices
        if event_type == TYPE_SLICE_END and depth > 0:
            arriving = self.arriving.pop(depth, None)
            self.open_slices = depth - 1
            if depth == 1:
                task = self.task()
                if task is not None:
                    out += _flows_to_awaiters(task)
        else:
            arriving = self.arriving.pop(0, None) if self.arriving else None
            if event_type == TYPE_SLICE_BEGIN:
                self.open_slices = depth + 1
        if arriving:
            out += flow_fields((), tuple(arriving))
        return out

    def await_flow(self, flow_id: int) -> None:
        """Makes the slice this task is awaiting in (or its next event) end flow `flow_id`."""
        self.arriving.setdefault(self.open_slices, []).append(flow_id)


_task_tracks: weakref.WeakKeyDictionary[Any, _TaskTrack] = weakref.WeakKeyDictionary()
_await_flows = itertools.count(1)


def _awaiting_tasks(task: Any) -> list[Any]:
    """The tasks waiting for `task`: awaiting it, or awaiting an `asyncio.gather` of it."""
    asyncio = sys.modules["asyncio"]
    out = []
    for callback, _context in task._callbacks or ():
        owner = getattr(callback, "__self__", None)  # a task's wakeup
        if isinstance(owner, asyncio.Task):
            out.append(owner)
            continue
        code = getattr(callback, "__code__", None)
        if code is None or "outer" not in code.co_freevars:
            continue
        outer = callback.__closure__[code.co_freevars.index("outer")].cell_contents
        if isinstance(outer, asyncio.Future):
            for outer_callback, _ in outer._callbacks or ():
                owner = getattr(outer_callback, "__self__", None)
                if isinstance(owner, asyncio.Task):
                    out.append(owner)
    return out


def _flows_to_awaiters(task: Any) -> bytes:
    """Flow ids starting at `task`'s last slice, one per awaiting task (which terminates it
    on its next event)."""
    ids = []
    for awaiter in _awaiting_tasks(task):
        flow_id = (_AWAIT_FLOW_BASE | next(_await_flows)) ^ process_uuid()
        _track_of_task(awaiter).await_flow(flow_id)
        ids.append(flow_id)
    return flow_fields(tuple(ids), ()) if ids else b""


def _track_of_task(task: Any) -> _TaskTrack:
    track = _task_tracks.get(task)
    if track is None:
        track = _task_tracks[task] = _TaskTrack(task)
    return track


def task_track() -> _TaskTrack | None:
    """The track of the running asyncio task, if any (async slices survive awaits on it)."""
    asyncio = sys.modules.get("asyncio")
    if asyncio is None:  # never imported: no loop can be running
        return None
    loop = asyncio._get_running_loop()
    if loop is None:
        return None
    task = asyncio.current_task(loop)
    if task is None:
        return None
    return _track_of_task(task)


def traced_coroutine(
    cat: Category, key: int, fn: Callable[..., Coroutine[Any, Any, Any]]
) -> Callable[..., Coroutine[Any, Any, Any]]:
    @functools.wraps(fn)
    async def traced(*args: Any, **kwargs: Any) -> Any:
        if not cat.enabled:
            return await fn(*args, **kwargs)
        track = task_track()
        writers = thread_writers(cat.mask)
        ts = now()
        write_event(
            writers,
            key,
            TYPE_SLICE_BEGIN,
            ts,
            track,
            b"" if track is None else track.event_fields(TYPE_SLICE_BEGIN),
            [],
        )
        try:
            return await fn(*args, **kwargs)
        finally:
            ts = now()
            extra = b"" if track is None else track.event_fields(TYPE_SLICE_END)
            for writer in writers:
                writer.event(0, TYPE_SLICE_END, ts, extra, b"")

    return traced
