"""`linux.process_stats`: the process tree and per-process memory counters, from /proc."""

from perfetto_probes.ps._proc_parsers import (
    ProcStatus,
    parse_cmdline,
    parse_oom_score_adj,
    parse_status,
)
from perfetto_probes.ps._process_stats_data_source import (
    MIN_POLL_MS,
    ProcessStatsDataSource,
    ProcessStatsErrors,
)

__all__ = [
    "MIN_POLL_MS",
    "ProcStatus",
    "ProcessStatsDataSource",
    "ProcessStatsErrors",
    "parse_cmdline",
    "parse_oom_score_adj",
    "parse_status",
]
