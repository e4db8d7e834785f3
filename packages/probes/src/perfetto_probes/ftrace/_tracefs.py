"""tracefs: where it is, and the ftrace instance one data source records into."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
from pathlib import Path

from perfetto_probes._errors import ProbesError

__all__ = ["CpuStats", "Instance", "find_tracefs", "read_cpu_stats", "stale_instances"]

_ROOTS = (Path("/sys/kernel/tracing"), Path("/sys/kernel/debug/tracing"))

CpuStats = dict[str, int]
"""One CPU's `per_cpu/cpuN/stats`: entries, overrun, commit_overrun, bytes_read,
dropped_events, read_events."""

_STATS_KEYS = {
    "entries": "entries",
    "overrun": "overrun",
    "commit overrun": "commit_overrun",
    "bytes": "bytes_read",
    "dropped events": "dropped_events",
    "read events": "read_events",
}


def _mount(path: Path) -> str | None:
    """Mounts tracefs at `path`; None, or why it could not."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mount(b"nodev", str(path).encode(), b"tracefs", 0, None) == 0:
        return None
    return os.strerror(ctypes.get_errno())


def find_tracefs() -> Path:
    """The root of tracefs; mounts it at /sys/kernel/tracing when it is not mounted and this
    process may (root)."""
    denied: Path | None = None
    for root in _ROOTS:
        try:
            (root / "events").stat()
        except PermissionError:
            denied = denied or root
            continue
        except OSError:
            continue
        return root
    if denied is not None:
        raise ProbesError(f"{denied}: permission denied (tracefs needs root or access to it)")
    target = _ROOTS[0]
    if not target.is_dir():
        raise ProbesError(f"{target}: no such directory (this kernel has no tracefs)")
    if os.geteuid() != 0:
        raise ProbesError(f"{target}: tracefs is not mounted, and mounting it needs root")
    reason = _mount(target)
    if reason is not None or not (target / "events").is_dir():
        raise ProbesError(f"{target}: cannot mount tracefs: {reason or 'no events directory'}")
    return target


def configured_cpus() -> int:
    """How many CPUs the machine has, online or not (each has a ring buffer in tracefs: one
    offline at the start may come back during the session)."""
    try:
        return max(1, os.sysconf("SC_NPROCESSORS_CONF"))
    except (OSError, ValueError):
        return os.cpu_count() or 1


def read_cpu_stats(path: Path) -> CpuStats:
    """The counters of a `per_cpu/cpuN/stats` file."""
    stats: CpuStats = {}
    for line in path.read_text().splitlines():
        key, _, value = line.partition(":")
        name = _STATS_KEYS.get(key.strip())
        if name is not None and value.strip().isdigit():
            stats[name] = int(value.strip())
    return stats


def _write(path: Path, value: str) -> None:
    try:
        path.write_text(value)
    except OSError as exc:
        raise ProbesError(f"{path}: {exc.strerror or exc}") from None


class Instance:
    """An ftrace instance (`instances/NAME`) made for one data source and removed at its end."""

    def __init__(self, root: Path, name: str) -> None:
        self.root = root
        self.path = root / "instances" / name

    def create(self) -> None:
        """Makes the instance; one left by a run that did not stop is removed first."""
        if self.path.exists():
            self.remove()
        try:
            self.path.mkdir()
        except OSError as exc:
            raise ProbesError(f"{self.path}: {exc.strerror or exc}") from None

    def configure(self, buffer_size_kb: int) -> None:
        """Sets the per-CPU buffer size and the boot clock, with tracing off."""
        _write(self.path / "tracing_on", "0")
        _write(self.path / "buffer_size_kb", str(buffer_size_kb))
        _write(self.path / "trace_clock", "boot")

    def enable(self, group: str, name: str) -> bool:
        """Enables one event; False when the kernel refused. An event without an `enable`
        file (ftrace/print) is always recorded."""
        path = self.path / "events" / group / name / "enable"
        if not path.exists():
            return True
        try:
            path.write_text("1")
        except OSError:
            return False
        return True

    def buffer_size_kb(self) -> int | None:
        """The per-CPU buffer size the kernel set (it rounds the requested one up)."""
        try:
            return int((self.path / "buffer_size_kb").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def tracing_on(self, on: bool) -> None:
        _write(self.path / "tracing_on", "1" if on else "0")

    def remove(self) -> None:
        """Turns tracing off, disables the events and removes the instance."""
        for name in ("tracing_on", "events/enable"):
            # An instance half made fails here: rmdir below says what is wrong.
            with contextlib.suppress(OSError):
                (self.path / name).write_text("0")
        try:
            self.path.rmdir()
        except FileNotFoundError:
            pass
        except OSError as exc:
            if exc.errno == errno.EBUSY:
                raise ProbesError(f"{self.path}: in use by another reader") from None
            raise ProbesError(f"{self.path}: {exc.strerror or exc}") from None


def stale_instances(root: Path, prefix: str) -> list[str]:
    """Instances named PREFIX<pid>_... whose process no longer runs (left by a crash)."""
    stale: list[str] = []
    try:
        names = os.listdir(root / "instances")
    except OSError:
        return stale
    for name in names:
        if not name.startswith(prefix):
            continue
        pid = name[len(prefix) :].partition("_")[0]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            stale.append(name)
    return stale
