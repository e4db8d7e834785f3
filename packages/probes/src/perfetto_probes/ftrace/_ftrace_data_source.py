"""linux.ftrace: the kernel's trace events of an ftrace instance of its own, read from each
CPU's ring buffer as binary pages and written as FtraceEventBundles."""

from __future__ import annotations

import contextlib
import itertools
import os
from pathlib import Path

from perfetto_protos.config.data_source_config_pb2 import DataSourceConfig
from perfetto_protos.trace.ftrace.ftrace_event_bundle_pb2 import FtraceParseStatus
from perfetto_protos.trace.ftrace.ftrace_stats_pb2 import FtraceStats
from perfetto_protos.trace.trace_packet_pb2 import TracePacket

from perfetto_probes._data_source import PacketSink
from perfetto_probes._errors import ProbesError
from perfetto_probes.ftrace._formats import (
    FormatError,
    FormatField,
    event_layout,
    page_layout,
    parse_format,
)
from perfetto_probes.ftrace._page_parser import BundleWriter, EventLayout, PageLayout
from perfetto_probes.ftrace._tracefs import (
    CpuStats,
    Instance,
    configured_cpus,
    find_tracefs,
    read_cpu_stats,
    stale_instances,
)

__all__ = ["FtraceDataSource"]

DEFAULT_BUFFER_SIZE_KB = 2048
DEFAULT_DRAIN_PERIOD_MS = 100
INSTANCE_PREFIX = "perfetto_py_"
_STATUS_UNEXPECTED_READ_ERROR = FtraceParseStatus.FTRACE_STATUS_UNEXPECTED_READ_ERROR
_STATUS_PARTIAL_PAGE_READ = FtraceParseStatus.FTRACE_STATUS_PARTIAL_PAGE_READ
_instances = itertools.count()


class _Cpu:
    """One CPU's ring buffer: its trace_pipe_raw, opened non-blocking, and its writer."""

    def __init__(self, cpu: int, fd: int, writer: BundleWriter) -> None:
        self.cpu = cpu
        self.fd = fd
        self.writer = writer


class FtraceDataSource:
    """The linux.ftrace data source of one tracing session (see ProbesDataSource)."""

    def __init__(self, config: DataSourceConfig, sink: PacketSink) -> None:
        self.config = config.ftrace_config
        self.sink = sink
        self.drain_period_ns = (self.config.drain_period_ms or DEFAULT_DRAIN_PERIOD_MS) * 1_000_000
        self.instance: Instance | None = None
        self.cpus: list[_Cpu] = []
        self.unknown_events: list[str] = []
        self.failed_events: list[str] = []
        self.read_errors: set[FtraceParseStatus.ValueType] = set()
        self.seen_pids: set[int] = set()
        self.page: PageLayout | None = None
        self.drain_pages = 0  # the most pages one drain reads from a CPU
        self.events_read = 0
        """The events parsed from the ring buffers so far (every CPU)."""
        self.cpu_stats: dict[FtraceStats.Phase.ValueType, dict[int, CpuStats]] = {}
        """Each CPU's `per_cpu/cpuN/stats` as written in the FtraceStats of each phase."""
        self.parse_errors: list[FtraceParseStatus.ValueType] = []
        """The `ftrace_parse_errors` of the last FtraceStats written."""

    def start(self) -> None:
        root = find_tracefs()
        for name in stale_instances(root, INSTANCE_PREFIX):
            # Another data source starting at the same time may be removing it too: the left
            # instance is not this one's to fail on.
            with contextlib.suppress(ProbesError):
                Instance(root, name).remove()
        name = self.config.instance_name or f"{INSTANCE_PREFIX}{os.getpid()}_{next(_instances)}"
        if "/" in name or name in ("", ".", ".."):
            raise ProbesError(f"ftrace instance_name {name!r}: not a directory name")
        instance = Instance(root, name)
        instance.create()
        self.instance = instance
        try:
            self._set_up(root, instance)
        except BaseException:
            self._close()
            raise
        self._write_stats(FtraceStats.START_OF_TRACE)

    def _set_up(self, root: Path, instance: Instance) -> None:
        instance.configure(self.config.buffer_size_kb or DEFAULT_BUFFER_SIZE_KB)
        events = self._enable_events(instance)
        common: list[FormatField] = []
        layouts: dict[int, EventLayout] = {}
        for group, name, event_id, fields in events:
            layouts[event_id] = event_layout(group, name, fields)
            common = fields
        if not common:
            common = parse_format((root / "events/sched/sched_switch/format").read_text())[1]
        try:
            self.page = page_layout(
                (root / "events/header_page").read_text(),
                (root / "events/header_event").read_text(),
                common,
            )
        except OSError as exc:
            raise ProbesError(f"{root / 'events'}: {exc.strerror or exc}") from None
        kb = instance.buffer_size_kb() or self.config.buffer_size_kb or DEFAULT_BUFFER_SIZE_KB
        self.drain_pages = kb * 1024 // self.page.page_size + 1
        for cpu in range(configured_cpus()):
            path = instance.path / "per_cpu" / f"cpu{cpu}" / "trace_pipe_raw"
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
            except OSError:
                self.read_errors.add(_STATUS_UNEXPECTED_READ_ERROR)  # e.g. an offline CPU
                continue
            writer = BundleWriter(cpu, self.page, layouts, self.config.compact_sched.enabled)
            self.cpus.append(_Cpu(cpu, fd, writer))
        instance.tracing_on(True)

    def _enable_events(self, instance: Instance) -> list[tuple[str, str, int, list[FormatField]]]:
        events_dir = instance.path / "events"
        wanted: list[tuple[str, str]] = []
        for spec in dict.fromkeys(self.config.ftrace_events):
            group, _, name = spec.rpartition("/")
            if group and name == "*":
                names = sorted(p.name for p in (events_dir / group).glob("*") if p.is_dir())
                if not names:
                    self.unknown_events.append(spec)
                wanted += [(group, n) for n in names]
            elif group:
                if (events_dir / group / name).is_dir():
                    wanted.append((group, name))
                else:
                    self.unknown_events.append(spec)
            else:
                groups = sorted(p.parent.name for p in events_dir.glob(f"*/{name}") if p.is_dir())
                if not groups:
                    self.unknown_events.append(spec)
                wanted += [(g, name) for g in groups]
        enabled = []
        for group, name in dict.fromkeys(wanted):
            try:
                event_id, fields = parse_format((events_dir / group / name / "format").read_text())
            except (OSError, FormatError):
                self.failed_events.append(f"{group}/{name}")
                continue
            if not instance.enable(group, name):
                self.failed_events.append(f"{group}/{name}")
                continue
            enabled.append((group, name, event_id, fields))
        return enabled

    def _drain(self) -> None:
        page_size = self.page.page_size if self.page is not None else 0
        for cpu in self.cpus:
            writer = cpu.writer
            # At most a buffer's worth: a CPU that writes as fast as it is read ends a drain.
            for _ in range(self.drain_pages):
                try:
                    data = os.read(cpu.fd, page_size)
                except BlockingIOError:
                    break
                except OSError:
                    self.read_errors.add(_STATUS_UNEXPECTED_READ_ERROR)
                    break
                if not data:
                    break
                if len(data) != page_size:
                    self.read_errors.add(_STATUS_PARTIAL_PAGE_READ)
                writer.parse_page(data)
            for packet in writer.take_packets():
                self.sink(packet)
            self.seen_pids |= writer.take_seen_pids()
        self.events_read = sum(cpu.writer.events_written for cpu in self.cpus)

    def poll(self, now_ns: int) -> int | None:
        self._drain()
        return now_ns + self.drain_period_ns

    def flush(self) -> None:
        self._drain()

    def stop(self) -> None:
        if self.instance is None:
            return
        try:
            self.instance.tracing_on(False)
            self._drain()
            self._write_stats(FtraceStats.END_OF_TRACE)
        finally:
            self._close()

    def _close(self) -> None:
        for cpu in self.cpus:
            os.close(cpu.fd)
        self.cpus = []
        instance, self.instance = self.instance, None
        if instance is not None:
            instance.remove()

    def take_seen_pids(self) -> set[int]:
        """The thread ids seen in events since the last call."""
        pids, self.seen_pids = self.seen_pids, set()
        return pids

    def _write_stats(self, phase: FtraceStats.Phase.ValueType) -> None:
        assert self.instance is not None
        packet = TracePacket()
        stats = packet.ftrace_stats
        stats.phase = phase
        by_cpu = self.cpu_stats[phase] = {}
        for cpu in self.cpus:
            try:
                values = read_cpu_stats(self.instance.path / "per_cpu" / f"cpu{cpu.cpu}" / "stats")
            except OSError:
                self.read_errors.add(_STATUS_UNEXPECTED_READ_ERROR)
                continue
            by_cpu[cpu.cpu] = values
            entry = stats.cpu_stats.add(cpu=cpu.cpu)
            for name, value in values.items():
                setattr(entry, name, value)
        stats.unknown_ftrace_events.extend(self.unknown_events)
        stats.failed_ftrace_events.extend(self.failed_events)
        errors: set[int] = set(self.read_errors)
        for cpu in self.cpus:
            errors |= cpu.writer.parse_errors
        self.parse_errors = [FtraceParseStatus.ValueType(e) for e in sorted(errors)]
        stats.ftrace_parse_errors.extend(self.parse_errors)
        if self.page is not None:
            kb = self.instance.buffer_size_kb()
            if kb is not None:
                stats.cpu_buffer_size_pages = kb * 1024 // self.page.page_size
        self.sink(packet.SerializeToString())
