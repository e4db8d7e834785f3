"""Ending the child processes a test started."""

from __future__ import annotations

import signal
import subprocess
from typing import Any

from perfetto_testing._wait import TIMEOUT


def end_process(
    process: subprocess.Popen[Any], sig: int = signal.SIGTERM, timeout: float = TIMEOUT
) -> int:
    """Sends `sig` to `process` if it still runs, waits up to `timeout` for it to exit, kills it
    if it has not, and reaps it; returns its exit status. Its pipes stay open for the caller
    (and its reader threads) to drain and close."""
    if process.poll() is None:
        process.send_signal(sig)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    return process.returncode
