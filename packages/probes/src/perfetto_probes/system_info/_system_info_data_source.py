"""`linux.system_info`: the CPUs, once at start."""

from __future__ import annotations

from perfetto_protos.config.data_source_config_pb2 import DataSourceConfig
from perfetto_protos.trace.system_info.cpu_info_pb2 import CpuInfo
from perfetto_protos.trace.trace_packet_pb2 import TracePacket

from perfetto_probes._data_source import PacketSink
from perfetto_probes._errors import ProbesError
from perfetto_probes._procfs import boottime_ns, read_proc_file
from perfetto_probes.system_info._cpu_info import Cpu, parse_cpuinfo, parse_frequencies

__all__ = ["SystemInfoDataSource"]


def _read_text(path: str) -> str | None:
    try:
        return read_proc_file(path).decode(errors="replace")
    except OSError:
        return None


class SystemInfoDataSource:
    """One `linux.system_info` instance (a `ProbesDataSource`): a CpuInfo packet at start,
    each CPU of /proc/cpuinfo with its frequencies and capacity where sysfs has them."""

    def __init__(
        self,
        config: DataSourceConfig,
        sink: PacketSink,
        proc: str = "/proc",
        sys_cpu: str = "/sys/devices/system/cpu",
    ) -> None:
        del config  # SystemInfoConfig's only option (irq_names) is not supported
        self._sink = sink
        self._cpuinfo = f"{proc}/cpuinfo"
        self._sys_cpu = sys_cpu

    def _complete(self, cpu: Cpu) -> None:
        base = f"{self._sys_cpu}/cpu{cpu.index}"
        available = _read_text(f"{base}/cpufreq/scaling_available_frequencies")
        if available is not None:
            cpu.frequencies = parse_frequencies(available, first_column=False)
        elif (in_state := _read_text(f"{base}/cpufreq/stats/time_in_state")) is not None:
            cpu.frequencies = parse_frequencies(in_state, first_column=True)
        capacity = _read_text(f"{base}/cpu_capacity")
        if capacity is not None and capacity.strip().isdigit():
            cpu.capacity = int(capacity.strip())

    def start(self) -> None:
        try:
            text = read_proc_file(self._cpuinfo).decode(errors="replace")
        except OSError as exc:
            raise ProbesError(f"cannot read {self._cpuinfo}: {exc.strerror or exc}") from None
        info = CpuInfo()
        for cpu in parse_cpuinfo(text):
            self._complete(cpu)
            entry = info.cpus.add(processor=cpu.processor, frequencies=cpu.frequencies)
            if cpu.capacity is not None:
                entry.capacity = cpu.capacity
        self._sink(TracePacket(timestamp=boottime_ns(), cpu_info=info).SerializeToString())

    def poll(self, now_ns: int) -> int | None:
        return None

    def flush(self) -> None:
        """Everything is written at start."""

    def stop(self) -> None:
        """Nothing to restore."""
