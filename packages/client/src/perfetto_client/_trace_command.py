"""The `perfetto-trace` command's entry point: SIGUSR1 is held from its first line.

SIGUSR1 asks a `--ring` recording for a snapshot, and its default action ends the process.
Loading the recorder takes a while, so the signal stays blocked until the recorder's handler
is installed (`release_snapshot_signal`): one that arrives meanwhile waits for it instead of
killing the program, and its snapshot is written once the recording runs.
"""

from __future__ import annotations

import signal

__all__ = ["main", "release_snapshot_signal"]

_held: set[signal.Signals] = set()


def main() -> int:
    """`perfetto-trace`."""
    if signal.SIGUSR1 not in signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1}):
        _held.add(signal.SIGUSR1)
    from perfetto_client._tracer._cli import main as perfetto_trace

    return perfetto_trace()


def release_snapshot_signal() -> None:
    """Unblocks SIGUSR1 if `main` blocked it: a pending one is handled now."""
    if _held:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _held)
        _held.clear()
