"""What every probes data source is to its host (`traced_probes`, or `perfetto-trace run
--sched` in-process): a started instance that writes TracePackets into a sink of its own."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Protocol

from perfetto_protos.config.data_source_config_pb2 import DataSourceConfig

from perfetto_probes._errors import ProbesError

PacketSink = Callable[[bytes], None]
"""Writes one serialized TracePacket (its fields, without `trusted_packet_sequence_id`, which
the host's writer sets): each data source instance has a sink, i.e. a sequence, of its own."""


class ProbesDataSource(Protocol):
    """One instance of a probes data source, created for one tracing session.

    The host calls `start()` once, then `poll()` from one thread whenever the time it last
    returned has come, `flush()` when the session flushes, and `stop()` once at the end. Every
    call may write packets into the instance's sink. A failure that ends only this data source
    raises ProbesError with one line naming the path and the reason.
    """

    def start(self) -> None:
        """Sets up what the config asks for and writes the packets due at the start."""

    def poll(self, now_ns: int) -> int | None:
        """Does the work due at `now_ns` (CLOCK_BOOTTIME); returns when it next wants to be
        polled (CLOCK_BOOTTIME ns), or None for never."""

    def flush(self) -> None:
        """Writes everything read so far."""

    def stop(self) -> None:
        """Writes its last packets and restores what it changed on the host."""


DataSourceFactory = Callable[[DataSourceConfig, PacketSink], ProbesDataSource]
"""Creates an instance (not started) from its DataSourceConfig and its sink."""

DATA_SOURCES: dict[str, str] = {
    "linux.ftrace": "perfetto_probes.ftrace:FtraceDataSource",
    "linux.process_stats": "perfetto_probes.ps:ProcessStatsDataSource",
    "linux.sys_stats": "perfetto_probes.sys_stats:SysStatsDataSource",
    "linux.system_info": "perfetto_probes.system_info:SystemInfoDataSource",
}
"""Upstream's data source names that traced_probes registers, and where each factory lives
(imported on first use)."""


def data_source_factory(name: str) -> DataSourceFactory:
    """The factory of the data source registered as `name`."""
    try:
        module, _, attribute = DATA_SOURCES[name].partition(":")
    except KeyError:
        raise ProbesError(f"no probes data source is named {name!r}") from None
    factory: DataSourceFactory = getattr(importlib.import_module(module), attribute)
    return factory
