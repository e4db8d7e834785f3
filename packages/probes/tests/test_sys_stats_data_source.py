"""linux.sys_stats and linux.system_info on this machine, and where their files are missing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from perfetto_probes import ProbesError, data_source_factory
from perfetto_probes.sys_stats import SysStatsDataSource
from perfetto_probes.system_info import SystemInfoDataSource
from perfetto_protos.common import sys_stats_counters_pb2 as counters
from perfetto_protos.config.data_source_config_pb2 import DataSourceConfig
from perfetto_protos.trace.trace_packet_pb2 import TracePacket

MS = 1_000_000


def _sys_stats_config(**fields: object) -> DataSourceConfig:
    config = DataSourceConfig(name="linux.sys_stats")
    for name, value in fields.items():
        field = getattr(config.sys_stats_config, name)
        if isinstance(value, list):
            field.extend(value)
        else:
            setattr(config.sys_stats_config, name, value)
    return config


def test_the_factories_are_registered_under_upstreams_names() -> None:
    assert data_source_factory("linux.sys_stats") is SysStatsDataSource
    assert data_source_factory("linux.system_info") is SystemInfoDataSource


def test_each_source_is_read_at_its_own_period_with_the_selected_counters() -> None:
    packets: list[TracePacket] = []
    config = _sys_stats_config(
        meminfo_period_ms=100,
        meminfo_counters=[counters.MEMINFO_MEM_TOTAL, counters.MEMINFO_MEM_AVAILABLE],
        stat_period_ms=300,
        stat_counters=[2],  # STAT_IRQ_COUNTS
    )
    source = SysStatsDataSource(config, lambda data: packets.append(TracePacket.FromString(data)))
    source.start()
    assert source.poll(1000 * MS) == 1100 * MS
    first = packets[-1].sys_stats
    assert sorted(entry.key for entry in first.meminfo) == [
        counters.MEMINFO_MEM_TOTAL,
        counters.MEMINFO_MEM_AVAILABLE,
    ]
    total_kb = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 1024
    mem_total = next(e.value for e in first.meminfo if e.key == counters.MEMINFO_MEM_TOTAL)
    assert 0.9 * total_kb <= mem_total <= total_kb
    assert first.num_irq_total > 0
    assert not first.cpu_stat
    assert not first.vmstat
    assert source.poll(1100 * MS) == 1200 * MS
    assert packets[-1].sys_stats.meminfo
    assert not packets[-1].sys_stats.HasField("num_irq_total")
    assert len(packets) == 2


def test_periods_below_the_minimum_are_raised_and_none_means_never() -> None:
    packets: list[bytes] = []
    assert SysStatsDataSource(_sys_stats_config(), packets.append).poll(0) is None
    source = SysStatsDataSource(_sys_stats_config(vmstat_period_ms=1), packets.append)
    assert source.poll(5 * MS) == 10 * MS


def test_a_missing_file_fails_the_data_source_with_one_line(tmp_path: Path) -> None:
    source = SysStatsDataSource(
        _sys_stats_config(vmstat_period_ms=100), lambda data: None, str(tmp_path)
    )
    with pytest.raises(ProbesError, match=rf"^cannot read {tmp_path}/vmstat: No such file"):
        source.start()


def test_system_info_writes_every_cpu_once() -> None:
    packets: list[TracePacket] = []
    source = SystemInfoDataSource(
        DataSourceConfig(name="linux.system_info"),
        lambda data: packets.append(TracePacket.FromString(data)),
    )
    source.start()
    assert source.poll(0) is None
    assert len(packets) == 1
    assert len(packets[0].cpu_info.cpus) == os.cpu_count()


def test_system_info_without_cpuinfo_fails_with_one_line(tmp_path: Path) -> None:
    source = SystemInfoDataSource(DataSourceConfig(), lambda data: None, str(tmp_path))
    with pytest.raises(ProbesError, match=r"^cannot read .*/cpuinfo: No such file"):
        source.start()
