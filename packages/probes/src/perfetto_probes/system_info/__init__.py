"""`linux.system_info`: the machine's CPUs."""

from perfetto_probes.system_info._cpu_info import Cpu, parse_cpuinfo, parse_frequencies
from perfetto_probes.system_info._system_info_data_source import SystemInfoDataSource

__all__ = ["Cpu", "SystemInfoDataSource", "parse_cpuinfo", "parse_frequencies"]
