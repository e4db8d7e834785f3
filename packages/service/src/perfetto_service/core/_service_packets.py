"""Builders of the packets the service writes itself (trusted_packet_sequence_id 1).

Each builder returns one serialized TracePacket, with fields in the order upstream's
service writes them and nested messages length-prefixed as protozero does (1 byte up to
127 bytes, else a 4-byte redundant varint), so that the bytes match upstream's for the
same values. The TraceConfig and TraceStats bodies are serialized by protobuf, whose
nested lengths are minimal varints.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from perfetto_protos.common.builtin_clock_pb2 import (
    BUILTIN_CLOCK_BOOTTIME,
    BUILTIN_CLOCK_MONOTONIC,
    BUILTIN_CLOCK_MONOTONIC_COARSE,
    BUILTIN_CLOCK_MONOTONIC_RAW,
    BUILTIN_CLOCK_REALTIME,
    BUILTIN_CLOCK_REALTIME_COARSE,
)

from perfetto_service.core._field_encoding import bytes_field, nested_field, varint_field
from perfetto_service.core._trusted_fields import SERVICE_PACKET_SEQUENCE_ID

SYNC_MARKER = bytes.fromhex("82477a76b28d42ba81dc33326d57a079")
"""Payload of TracePacket.synchronization_marker (UUID 82477a76-b28d-42ba-81dc-33326d57a079)."""


class TracingServiceEventKind:
    """Field numbers of the TracingServiceEvent oneof members."""

    ALL_DATA_SOURCES_STARTED = 1
    TRACING_STARTED = 2
    ALL_DATA_SOURCES_FLUSHED = 3
    READ_TRACING_BUFFERS_COMPLETED = 4
    TRACING_DISABLED = 5
    SEIZED_FOR_BUGREPORT = 6
    FLUSH_STARTED = 9
    CLONE_STARTED = 10
    BUFFER_CLONED = 11


# TracePacket fields.
_TIMESTAMP = 8
_TRUSTED_UID = 3
_TRUSTED_PACKET_SEQUENCE_ID = 10
_TIMESTAMP_CLOCK_ID = 58
_MACHINE_ID = 98
_CLOCK_SNAPSHOT = 6
_TRACE_CONFIG = 33
_TRACE_STATS = 35
_SYNCHRONIZATION_MARKER = 36
_SYSTEM_INFO = 45
_SERVICE_EVENT = 69
_TRACE_UUID = 89
_TRACE_PROVENANCE = 124

# (Python clock id, BuiltinClock) in the order upstream snapshots Linux clocks.
_LINUX_CLOCKS: tuple[tuple[int, int], ...] = (
    (time.CLOCK_BOOTTIME, BUILTIN_CLOCK_BOOTTIME),
    (getattr(time, "CLOCK_REALTIME_COARSE", 5), BUILTIN_CLOCK_REALTIME_COARSE),
    (getattr(time, "CLOCK_MONOTONIC_COARSE", 6), BUILTIN_CLOCK_MONOTONIC_COARSE),
    (time.CLOCK_REALTIME, BUILTIN_CLOCK_REALTIME),
    (time.CLOCK_MONOTONIC, BUILTIN_CLOCK_MONOTONIC),
    (time.CLOCK_MONOTONIC_RAW, BUILTIN_CLOCK_MONOTONIC_RAW),
)


def _int32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def _int64(value: int) -> int:
    value &= (1 << 64) - 1
    return value - (1 << 64) if value >= 1 << 63 else value


class ClockReading(NamedTuple):
    """One clock of a snapshot: a BuiltinClock id and its value in ns."""

    clock_id: int
    timestamp: int


def capture_clock_snapshot() -> list[ClockReading]:
    """Reads the Linux clocks as close together as possible, BOOTTIME first."""
    values = [time.clock_gettime_ns(clock) for clock, _ in _LINUX_CLOCKS]
    return [
        ClockReading(builtin, value)
        for (_, builtin), value in zip(_LINUX_CLOCKS, values, strict=True)
    ]


def boot_time_ns() -> int:
    """CLOCK_BOOTTIME now, the clock of every timestamp the service writes."""
    return time.clock_gettime_ns(time.CLOCK_BOOTTIME)


class ServicePacketWriter:
    """Builds service packets for a service running as `uid`.

    `machine_id`, when not 0, is the adopted local machine the service's own packets are
    attributed to.
    """

    def __init__(self, uid: int, machine_id: int = 0) -> None:
        self._uid = uid
        header = varint_field(_TRUSTED_UID, _int32(uid)) + varint_field(
            _TRUSTED_PACKET_SEQUENCE_ID, SERVICE_PACKET_SEQUENCE_ID
        )
        self._sync_marker = header + bytes_field(_SYNCHRONIZATION_MARKER, SYNC_MARKER)
        header += varint_field(_TIMESTAMP_CLOCK_ID, BUILTIN_CLOCK_BOOTTIME)
        if machine_id:
            header += varint_field(_MACHINE_ID, machine_id & 0xFFFFFFFF)
        self._header = header

    @property
    def header(self) -> bytes:
        """The fields every service packet carries: uid, sequence id 1, clock id[, machine id]."""
        return self._header

    def sync_marker(self) -> bytes:
        """The synchronization marker packet (trusted uid and sequence id, marker last)."""
        return self._sync_marker

    def clock_snapshot(
        self,
        readings: Sequence[ClockReading],
        primary_trace_clock: int = BUILTIN_CLOCK_BOOTTIME,
    ) -> bytes:
        """A ClockSnapshot packet for `readings` (see `capture_clock_snapshot`)."""
        body = varint_field(2, primary_trace_clock or BUILTIN_CLOCK_BOOTTIME)
        body += b"".join(
            nested_field(1, varint_field(1, clock_id) + varint_field(2, timestamp))
            for clock_id, timestamp in readings
        )
        return nested_field(_CLOCK_SNAPSHOT, body) + self._header

    def trace_config(self, serialized_config: bytes) -> bytes:
        """The packet echoing the session's TraceConfig."""
        return self._header + nested_field(_TRACE_CONFIG, serialized_config)

    def trace_uuid(self, msb: int, lsb: int) -> bytes:
        """The TraceUuid packet (lsb is written before msb, like upstream)."""
        body = varint_field(2, _int64(lsb)) + varint_field(1, _int64(msb))
        return self._header + nested_field(_TRACE_UUID, body)

    def system_info(self, info: SystemInfo) -> bytes:
        """The SystemInfo packet."""
        body = bytes_field(4, info.tracing_service_version.encode())
        if info.timezone_off_mins is not None:
            body += varint_field(7, _int32(info.timezone_off_mins))
        if info.utsname is not None:
            sysname, version, machine, release = info.utsname
            body += nested_field(
                1,
                bytes_field(1, sysname.encode())
                + bytes_field(2, version.encode())
                + bytes_field(4, machine.encode())
                + bytes_field(3, release.encode()),
            )
        if info.page_size is not None:
            body += varint_field(6, info.page_size)
        if info.system_ram_bytes is not None:
            body += varint_field(16, info.system_ram_bytes)
        if info.num_cpus is not None:
            body += varint_field(8, info.num_cpus)
        return nested_field(_SYSTEM_INFO, body) + self._header

    def service_event(self, timestamp: int, event: int, value: int = 1) -> bytes:
        """A TracingServiceEvent packet setting oneof member `event` (a field number) to `value`."""
        return (
            varint_field(_TIMESTAMP, timestamp)
            + self._header
            + nested_field(_SERVICE_EVENT, varint_field(event, value))
        )

    def trace_provenance(
        self, timestamp: int, buffers: Sequence[Sequence[tuple[int, int]]]
    ) -> bytes:
        """The TraceProvenance packet: per buffer, its (sequence id, producer id) pairs."""
        body = b"".join(
            nested_field(
                2,
                b"".join(
                    nested_field(1, varint_field(1, sequence_id) + varint_field(2, producer))
                    for sequence_id, producer in sequences
                ),
            )
            for sequences in buffers
        )
        return (
            varint_field(_TIMESTAMP, timestamp)
            + nested_field(_TRACE_PROVENANCE, body)
            + self._header
        )

    def trace_stats(self, serialized_trace_stats: bytes) -> bytes:
        """The TraceStats packet."""
        return self._header + nested_field(_TRACE_STATS, serialized_trace_stats)


@dataclass(frozen=True)
class SystemInfo:
    """What the service reports about the machine in its SystemInfo packet."""

    tracing_service_version: str
    timezone_off_mins: int | None = None
    utsname: tuple[str, str, str, str] | None = None
    """(sysname, version, machine, release)."""
    page_size: int | None = None
    num_cpus: int | None = None
    system_ram_bytes: int | None = None


def machine_name() -> str:
    """This machine's name: PERFETTO_MACHINE_NAME, else the kernel's sysname (as upstream)."""
    return os.environ.get("PERFETTO_MACHINE_NAME") or os.uname().sysname


def collect_system_info(tracing_service_version: str) -> SystemInfo:
    """Reads this machine's SystemInfo the way upstream's service does."""
    uname = os.uname()
    page_size = os.sysconf("SC_PAGESIZE")
    ram_pages = os.sysconf("SC_PHYS_PAGES")
    return SystemInfo(
        tracing_service_version=tracing_service_version,
        timezone_off_mins=time.localtime().tm_gmtoff // 60,
        utsname=(uname.sysname, uname.version, uname.machine, uname.release),
        page_size=page_size,
        num_cpus=os.sysconf("SC_NPROCESSORS_CONF"),
        system_ram_bytes=ram_pages * page_size if ram_pages > 0 else None,
    )
