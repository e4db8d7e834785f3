"""AsyncioTaskRunner: tasks run in the order posted, on the loop, from any thread."""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable
from contextvars import Context
from typing import Any

from perfetto_service import AsyncioTaskRunner


class CountingLoop(asyncio.SelectorEventLoop):
    """A loop that counts the wake-ups asked of it from other threads."""

    def __init__(self) -> None:
        super().__init__()
        self.threadsafe_calls = 0

    def call_soon_threadsafe(  # type: ignore[override]
        self, callback: Callable[..., object], *args: Any, context: Context | None = None
    ) -> asyncio.Handle:
        self.threadsafe_calls += 1
        return super().call_soon_threadsafe(callback, *args, context=context)


def test_tasks_posted_on_the_loop_run_in_order_without_waking_it() -> None:
    loop = CountingLoop()
    runner = AsyncioTaskRunner(loop)
    ran: list[int] = []

    async def post_from_the_loop() -> None:
        for index in range(3):
            runner.post_task(functools.partial(ran.append, index))
        runner.post_task(lambda: runner.post_task(lambda: ran.append(3)))
        while len(ran) < 4:
            await asyncio.sleep(0)

    try:
        loop.run_until_complete(asyncio.wait_for(post_from_the_loop(), 10))
    finally:
        loop.close()
    assert ran == [0, 1, 2, 3]
    assert loop.threadsafe_calls == 0


def test_a_task_posted_from_another_thread_wakes_the_loop() -> None:
    loop = CountingLoop()
    runner = AsyncioTaskRunner(loop)
    ran: list[str] = []

    async def wait_for_the_other_thread() -> None:
        done = asyncio.Event()

        def task() -> None:
            ran.append("other")
            done.set()

        poster = threading.Thread(target=runner.post_task, args=(task,))
        poster.start()
        await done.wait()  # nothing else wakes the loop
        poster.join()

    try:
        loop.run_until_complete(asyncio.wait_for(wait_for_the_other_thread(), 10))
    finally:
        loop.close()
    assert ran == ["other"]
    assert loop.threadsafe_calls == 1


def test_tasks_posted_before_the_loop_runs_wait_for_it() -> None:
    loop = CountingLoop()
    runner = AsyncioTaskRunner(loop)
    ran: list[int] = []
    runner.post_task(lambda: ran.append(1))
    runner.post_task(lambda: ran.append(2))
    try:
        loop.run_until_complete(asyncio.sleep(0))
    finally:
        loop.close()
    assert ran == [1, 2]
