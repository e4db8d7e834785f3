"""SIGINT and SIGTERM: the request to stop the command's session."""

from __future__ import annotations

import signal
import threading
from types import FrameType

__all__ = ["STOP_REQUESTED", "handle_stop_signals", "ignore_stop_signals"]

STOP_REQUESTED = threading.Event()
"""Set by the first SIGINT or SIGTERM once `handle_stop_signals` ran."""

_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def handle_stop_signals() -> None:
    """From now on, SIGINT and SIGTERM set `STOP_REQUESTED`."""
    for signum in _STOP_SIGNALS:
        signal.signal(signum, _on_signal)


def ignore_stop_signals() -> None:
    """For the rest of the process's life, SIGINT and SIGTERM are ignored.

    Called once the session is over and the exit status decided: a signal while the command
    exits changes neither. (Restoring Python's handlers would not do: one arriving during the
    interpreter's shutdown, which gives a Python handler back to the default action, kills the
    process.)
    """
    for signum in _STOP_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)


def _on_signal(_signum: int, _frame: FrameType | None) -> None:
    STOP_REQUESTED.set()
