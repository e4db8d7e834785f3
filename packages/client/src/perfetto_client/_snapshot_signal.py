"""SIGUSR1, held from perfetto-trace's first line until the recorder can take it.

SIGUSR1 asks a `--ring` recording for a snapshot, and its default action ends the process.
Loading the recorder takes a while, so the signal stays blocked until the recorder's handler
is installed (`release`): one that arrives meanwhile waits for it instead of killing the
program, and its snapshot is written once the recording runs.
"""

from __future__ import annotations

import signal

__all__ = ["hold", "release"]

_held: set[signal.Signals] = set()


def hold() -> None:
    """Blocks SIGUSR1 (unless it already was)."""
    if signal.SIGUSR1 not in signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1}):
        _held.add(signal.SIGUSR1)


def release() -> None:
    """Unblocks SIGUSR1 if `hold` blocked it: a pending one is handled now."""
    if _held:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _held)
        _held.clear()
