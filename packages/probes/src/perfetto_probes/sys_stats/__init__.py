"""`linux.sys_stats`: system-wide counters from /proc/meminfo, /proc/vmstat and /proc/stat."""

from perfetto_probes.sys_stats._counters import MEMINFO_KEYS, VMSTAT_KEYS
from perfetto_probes.sys_stats._parsers import parse_meminfo, parse_stat, parse_vmstat
from perfetto_probes.sys_stats._sys_stats_data_source import MIN_PERIOD_MS, SysStatsDataSource

__all__ = [
    "MEMINFO_KEYS",
    "MIN_PERIOD_MS",
    "VMSTAT_KEYS",
    "SysStatsDataSource",
    "parse_meminfo",
    "parse_stat",
    "parse_vmstat",
]
