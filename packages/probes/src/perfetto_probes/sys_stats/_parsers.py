"""Parsers of /proc/meminfo, /proc/vmstat and /proc/stat that take any bytes.

Each fills a SysStats message with the counters selected and returns how many lines it could
not read (cut short, or a value that is not a number).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from perfetto_protos.config.sys_stats.sys_stats_config_pb2 import SysStatsConfig
from perfetto_protos.trace.sys_stats.sys_stats_pb2 import SysStats

__all__ = ["parse_meminfo", "parse_stat", "parse_vmstat"]

_CPU_TIMES = (
    "user_ns",
    "user_nice_ns",
    "system_mode_ns",
    "idle_ns",
    "io_wait_ns",
    "irq_ns",
    "softirq_ns",
    "steal_ns",
)


def _key_values(
    data: bytes, keys: Mapping[bytes, int], *, colon: bool
) -> tuple[list[tuple[int, int]], int]:
    values: list[tuple[int, int]] = []
    malformed = 0
    for line in data.split(b"\n"):
        words = line.split()
        if not words:
            continue
        name = words[0]
        if colon:
            if not name.endswith(b":"):
                malformed += 1
                continue
            name = name[:-1]
        key = keys.get(name)
        if key is None:
            continue
        try:
            values.append((key, int(words[1])))
        except (IndexError, ValueError):
            malformed += 1
    return values, malformed


def parse_meminfo(data: bytes, keys: Mapping[bytes, int], out: SysStats) -> int:
    """Adds `out.meminfo` entries (kB) for the lines whose key is in `keys`."""
    values, malformed = _key_values(data, keys, colon=True)
    for key, value in values:
        if value >= 0:
            out.meminfo.add(key=key, value=value)
    return malformed


def parse_vmstat(data: bytes, keys: Mapping[bytes, int], out: SysStats) -> int:
    """Adds `out.vmstat` entries for the lines whose key is in `keys`."""
    values, malformed = _key_values(data, keys, colon=False)
    for key, value in values:
        if value >= 0:
            out.vmstat.add(key=key, value=value)
    return malformed


def _numbers(words: list[bytes]) -> list[int] | None:
    try:
        numbers = [int(word) for word in words]
    except ValueError:
        return None
    return numbers if all(n >= 0 for n in numbers) else None


def parse_stat(data: bytes, selected: Collection[int], ns_per_tick: int, out: SysStats) -> int:
    """Fills `out` from /proc/stat: per-CPU times (ns), interrupt and softirq counts (the
    non-zero per-IRQ ones), forks; `selected` holds SysStatsConfig.StatCounters values."""
    malformed = 0
    for line in data.split(b"\n"):
        words = line.split()
        if not words:
            continue
        name, rest = words[0], words[1:]
        if name.startswith(b"cpu") and name != b"cpu":
            if SysStatsConfig.STAT_CPU_TIMES not in selected:
                continue
            times = _numbers(rest[: len(_CPU_TIMES)])
            if not name[3:].isdigit() or times is None or len(times) < 4:
                malformed += 1
                continue
            cpu = out.cpu_stat.add(cpu_id=int(name[3:]))
            for field, ticks in zip(_CPU_TIMES, times, strict=False):
                setattr(cpu, field, ticks * ns_per_tick)
        elif name in (b"intr", b"softirq"):
            irq = name == b"intr"
            if (
                SysStatsConfig.STAT_IRQ_COUNTS if irq else SysStatsConfig.STAT_SOFTIRQ_COUNTS
            ) not in selected:
                continue
            counts = _numbers(rest)
            if not counts:
                malformed += 1
                continue
            if irq:
                out.num_irq_total = counts[0]
                for number, count in enumerate(counts[1:]):
                    if count:
                        out.num_irq.add(irq=number, count=count)
            else:
                out.num_softirq_total = counts[0]
                for number, count in enumerate(counts[1:]):
                    out.num_softirq.add(irq=number, count=count)
        elif name == b"processes":
            if SysStatsConfig.STAT_FORK_COUNT not in selected:
                continue
            forks = _numbers(rest[:1])
            if not forks:
                malformed += 1
                continue
            out.num_forks = forks[0]
    return malformed
