"""`linux.sys_stats`: /proc/meminfo, /proc/vmstat and /proc/stat at their periods."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass

from perfetto_protos.config.data_source_config_pb2 import DataSourceConfig
from perfetto_protos.config.sys_stats.sys_stats_config_pb2 import SysStatsConfig
from perfetto_protos.trace.sys_stats.sys_stats_pb2 import SysStats
from perfetto_protos.trace.trace_packet_pb2 import TracePacket

from perfetto_probes._data_source import PacketSink
from perfetto_probes._errors import ProbesError
from perfetto_probes._procfs import boottime_ns, read_proc_file
from perfetto_probes.sys_stats._counters import MEMINFO_KEYS, VMSTAT_KEYS
from perfetto_probes.sys_stats._parsers import parse_meminfo, parse_stat, parse_vmstat

__all__ = ["MIN_PERIOD_MS", "SysStatsDataSource"]

_log = logging.getLogger("perfetto_probes")

MIN_PERIOD_MS = 10
"""The shortest period honoured (upstream's); shorter periods become this."""


@dataclass
class _Source:
    """One file read at its own period."""

    path: str
    period_ns: int
    parse: Callable[[bytes, SysStats], int]
    due_ns: int = 0


def _period_ms(value: int, name: str) -> int:
    if 0 < value < MIN_PERIOD_MS:
        _log.info(
            "%s %d is below %d ms: reading every %d ms", name, value, MIN_PERIOD_MS, MIN_PERIOD_MS
        )
        return MIN_PERIOD_MS
    return value


def _selected(values: list[int], keys: dict[bytes, int]) -> dict[bytes, int]:
    """The keys whose counter is in `values` (all of them when none is)."""
    if not values:
        return keys
    wanted = set(values)
    return {name: key for name, key in keys.items() if key in wanted}


class SysStatsDataSource:
    """One `linux.sys_stats` instance (a `ProbesDataSource`): a SysStats packet at each poll
    where a source is due, with the counters its config selects (all when it names none)."""

    def __init__(self, config: DataSourceConfig, sink: PacketSink, proc: str = "/proc") -> None:
        cfg = config.sys_stats_config
        self._sink = sink
        self.malformed_lines = 0
        """Lines left out because they were cut short or held no number."""
        meminfo_keys = _selected(list(cfg.meminfo_counters), MEMINFO_KEYS)
        vmstat_keys = _selected(list(cfg.vmstat_counters), VMSTAT_KEYS)
        stat_selected = set(cfg.stat_counters) or {
            SysStatsConfig.STAT_CPU_TIMES,
            SysStatsConfig.STAT_IRQ_COUNTS,
            SysStatsConfig.STAT_SOFTIRQ_COUNTS,
            SysStatsConfig.STAT_FORK_COUNT,
        }
        ns_per_tick = 1_000_000_000 // os.sysconf("SC_CLK_TCK")
        candidates = [
            (
                f"{proc}/meminfo",
                _period_ms(cfg.meminfo_period_ms, "meminfo_period_ms"),
                lambda data, out: parse_meminfo(data, meminfo_keys, out),
            ),
            (
                f"{proc}/vmstat",
                _period_ms(cfg.vmstat_period_ms, "vmstat_period_ms"),
                lambda data, out: parse_vmstat(data, vmstat_keys, out),
            ),
            (
                f"{proc}/stat",
                _period_ms(cfg.stat_period_ms, "stat_period_ms"),
                lambda data, out: parse_stat(data, stat_selected, ns_per_tick, out),
            ),
        ]
        self._sources = [
            _Source(path, period * 1_000_000, parse) for path, period, parse in candidates if period
        ]

    def start(self) -> None:
        for source in self._sources:
            try:
                read_proc_file(source.path)
            except OSError as exc:
                raise ProbesError(f"cannot read {source.path}: {exc.strerror or exc}") from None

    def poll(self, now_ns: int) -> int | None:
        if not self._sources:
            return None
        stats = SysStats()
        for source in self._sources:
            if source.due_ns > now_ns:
                continue
            source.due_ns = now_ns + source.period_ns - now_ns % source.period_ns
            try:
                data = read_proc_file(source.path)
            except OSError as exc:
                _log.warning(
                    "linux.sys_stats: cannot read %s: %s", source.path, exc.strerror or exc
                )
                continue
            self.malformed_lines += source.parse(data, stats)
        if stats.ListFields():
            stats.collection_end_timestamp = now = boottime_ns()
            self._sink(TracePacket(timestamp=now, sys_stats=stats).SerializeToString())
        return min(source.due_ns for source in self._sources)

    def flush(self) -> None:
        """Everything is written as it is read."""

    def stop(self) -> None:
        if self.malformed_lines:
            _log.info("linux.sys_stats: left out %d malformed lines", self.malformed_lines)
