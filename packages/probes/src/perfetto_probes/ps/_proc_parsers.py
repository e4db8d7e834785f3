"""Parsers of /proc/PID files (status, cmdline, oom_score_adj) that take any bytes."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "MEMORY_FIELDS",
    "ProcStatus",
    "parse_cmdline",
    "parse_oom_score_adj",
    "parse_status",
]

MEMORY_FIELDS: dict[bytes, str] = {
    b"VmSize": "vm_size_kb",
    b"VmLck": "vm_locked_kb",
    b"VmHWM": "vm_hwm_kb",
    b"VmRSS": "vm_rss_kb",
    b"RssAnon": "rss_anon_kb",
    b"RssFile": "rss_file_kb",
    b"RssShmem": "rss_shmem_kb",
    b"VmSwap": "vm_swap_kb",
}
"""The /proc/PID/status lines ProcessStats.Process reports (kB), by their field names."""


@dataclass
class ProcStatus:
    """What /proc/PID/status says about a thread or process; None where the line is missing
    or malformed (a file cut short)."""

    name: str | None = None
    tgid: int | None = None
    pid: int | None = None
    ppid: int | None = None
    uid: int | None = None
    memory: dict[str, int] | None = None
    """ProcessStats.Process field -> kB; None for a process without memory (a kernel thread)."""


def _first_int(value: bytes) -> int | None:
    words = value.split()
    if not words:
        return None
    try:
        return int(words[0])
    except ValueError:
        return None


def parse_status(data: bytes) -> ProcStatus:
    """Parses /proc/PID/status; lines it does not know or cannot read are left out."""
    status = ProcStatus()
    memory: dict[str, int] = {}
    for line in data.split(b"\n"):
        key, sep, value = line.partition(b":")
        if not sep:
            continue
        if key == b"Name":
            # The name is the rest of the line after the tab (it may hold spaces or colons).
            status.name = value.lstrip(b"\t ").decode(errors="replace")
        elif key == b"Tgid":
            status.tgid = _first_int(value)
        elif key == b"Pid":
            status.pid = _first_int(value)
        elif key == b"PPid":
            status.ppid = _first_int(value)
        elif key == b"Uid":
            status.uid = _first_int(value)  # real, effective, saved, fs: the real one
        elif (field := MEMORY_FIELDS.get(key)) is not None:
            kb = _first_int(value)
            if kb is not None and kb >= 0:
                memory[field] = kb
    if "vm_size_kb" in memory:
        status.memory = memory
    return status


def parse_cmdline(data: bytes) -> list[str]:
    """argv from /proc/PID/cmdline (NUL-separated, the last NUL possibly missing)."""
    if data.endswith(b"\0"):
        data = data[:-1]
    if not data:
        return []
    return [arg.decode(errors="replace") for arg in data.split(b"\0")]


def parse_oom_score_adj(data: bytes) -> int | None:
    """The value of /proc/PID/oom_score_adj; None if malformed."""
    try:
        return int(data.strip())
    except ValueError:
        return None
