"""A thread's event loop: posted tasks, delayed tasks and file descriptor watches."""

from __future__ import annotations

import contextlib
import heapq
import itertools
import logging
import os
import selectors
import threading
import time
from collections import deque
from collections.abc import Callable

__all__ = ["TaskRunner"]

_log = logging.getLogger("heapprofd")


class TaskRunner:
    """Runs tasks posted from any thread on the thread that calls `run()`."""

    def __init__(self) -> None:
        self._tasks: deque[Callable[[], None]] = deque()
        self._delayed: list[tuple[float, int, Callable[[], None]]] = []
        self._counter = itertools.count()
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._lock = threading.Lock()
        self._quit = False

    def post_task(self, task: Callable[[], None]) -> None:
        with self._lock:
            self._tasks.append(task)
        self._wake()

    def post_delayed_task(self, task: Callable[[], None], delay_ms: int) -> None:
        with self._lock:
            due = time.monotonic() + delay_ms / 1000
            heapq.heappush(self._delayed, (due, next(self._counter), task))
        self._wake()

    def add_fd_watch(self, fd: int, callback: Callable[[], None]) -> None:
        """Calls `callback` on this runner whenever `fd` is readable (call from the runner)."""
        self._selector.register(fd, selectors.EVENT_READ, callback)

    def remove_fd_watch(self, fd: int) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(fd)

    def quit(self) -> None:
        """Makes `run()` return after the current task (callable from any thread)."""
        self._quit = True
        self._wake()

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"\0")
        except BlockingIOError:
            pass
        except OSError:
            pass

    def run(self, idle_timeout_s: float | None = None) -> None:
        """Runs until `quit()`; `idle_timeout_s` bounds each wait."""
        while not self._quit:
            timeout = idle_timeout_s
            with self._lock:
                if self._tasks:
                    timeout = 0
                elif self._delayed:
                    wait = max(0.0, self._delayed[0][0] - time.monotonic())
                    timeout = wait if timeout is None else min(wait, timeout)
            for key, _events in self._selector.select(timeout):
                callback = key.data
                if callback is None:
                    try:
                        while os.read(self._wake_r, 4096):
                            pass
                    except BlockingIOError:
                        pass
                else:
                    self._run_one(callback)
            self._run_due()

    def _run_due(self) -> None:
        now = time.monotonic()
        with self._lock:
            ready = list(self._tasks)
            self._tasks.clear()
            while self._delayed and self._delayed[0][0] <= now:
                ready.append(heapq.heappop(self._delayed)[2])
        for task in ready:
            self._run_one(task)

    def _run_one(self, task: Callable[[], None]) -> None:
        try:
            task()
        except Exception:
            _log.exception("task failed")

    def close(self) -> None:
        self._selector.close()
        os.close(self._wake_r)
        os.close(self._wake_w)
