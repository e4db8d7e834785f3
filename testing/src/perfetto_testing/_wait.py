"""Limits on how long a test waits, and a wait for a condition."""

from __future__ import annotations

import time
from collections.abc import Callable

TIMEOUT = 60.0
"""A limit, not a duration: how long a test waits for what takes a moment (a daemon to start,
a reply, a process to end), generous for a loaded 2-core machine."""

SLOW_TIMEOUT = 600.0
"""A limit on what takes minutes on a loaded machine: a build, a wheel install, an example."""


def wait_for(
    predicate: Callable[[], object], timeout: float = TIMEOUT, what: str = "a condition"
) -> None:
    """Polls `predicate` until it holds; fails the test (AssertionError naming `what`) when it
    still does not after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.005)
