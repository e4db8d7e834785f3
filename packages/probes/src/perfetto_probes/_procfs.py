"""Reading /proc and /sys files whose owner may vanish or whose text may be cut short."""

from __future__ import annotations

import errno
import os
import time

__all__ = ["VANISHED", "boottime_ns", "numeric_entries", "read_proc_file"]

VANISHED = (errno.ENOENT, errno.ESRCH)
"""The errnos of a /proc file whose process exited while it was read."""


def boottime_ns() -> int:
    """Now on CLOCK_BOOTTIME, the clock every probes packet is stamped with."""
    return time.clock_gettime_ns(time.CLOCK_BOOTTIME)


def read_proc_file(path: str) -> bytes:
    """The whole file; OSError as the kernel gave it (errno in VANISHED: the process exited)."""
    with open(path, "rb", buffering=0) as f:
        chunks = []
        while chunk := f.read(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def numeric_entries(directory: str) -> list[int]:
    """The entries of `directory` that are numbers (pids, tids, cpus), ascending; [] if the
    directory vanished."""
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    return sorted(int(name) for name in names if name.isdigit())
