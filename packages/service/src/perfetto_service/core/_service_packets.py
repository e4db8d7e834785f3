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
from perfetto_protos.tags.fields import (
    ClockSnapshot_Clock_clock_id_ID,
    ClockSnapshot_Clock_timestamp_ID,
    ClockSnapshot_clocks_ID,
    ClockSnapshot_primary_trace_clock_ID,
    SystemInfo_num_cpus_ID,
    SystemInfo_page_size_ID,
    SystemInfo_system_ram_bytes_ID,
    SystemInfo_timezone_off_mins_ID,
    SystemInfo_tracing_service_version_ID,
    SystemInfo_utsname_ID,
    TracePacket_clock_snapshot_ID,
    TracePacket_machine_id_ID,
    TracePacket_service_event_ID,
    TracePacket_synchronization_marker_ID,
    TracePacket_system_info_ID,
    TracePacket_timestamp_clock_id_ID,
    TracePacket_timestamp_ID,
    TracePacket_trace_config_ID,
    TracePacket_trace_provenance_ID,
    TracePacket_trace_stats_ID,
    TracePacket_trace_uuid_ID,
    TracePacket_trusted_packet_sequence_id_ID,
    TracePacket_trusted_uid_ID,
    TraceProvenance_Buffer_sequences_ID,
    TraceProvenance_buffers_ID,
    TraceProvenance_Sequence_id_ID,
    TraceProvenance_Sequence_producer_id_ID,
    TraceUuid_lsb_ID,
    TraceUuid_msb_ID,
    Utsname_machine_ID,
    Utsname_release_ID,
    Utsname_sysname_ID,
    Utsname_version_ID,
)

from perfetto_service.core._field_encoding import bytes_field, nested_field, varint_field
from perfetto_service.core._trusted_fields import SERVICE_PACKET_SEQUENCE_ID

SYNC_MARKER = bytes.fromhex("82477a76b28d42ba81dc33326d57a079")
"""Payload of TracePacket.synchronization_marker (UUID 82477a76-b28d-42ba-81dc-33326d57a079)."""


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


def clock_snapshot_clocks(readings: Sequence[ClockReading]) -> bytes:
    """The `clocks` fields of a ClockSnapshot message holding `readings`."""
    return b"".join(
        nested_field(
            ClockSnapshot_clocks_ID,
            varint_field(ClockSnapshot_Clock_clock_id_ID, clock_id)
            + varint_field(ClockSnapshot_Clock_timestamp_ID, timestamp),
        )
        for clock_id, timestamp in readings
    )


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
        header = varint_field(TracePacket_trusted_uid_ID, _int32(uid)) + varint_field(
            TracePacket_trusted_packet_sequence_id_ID, SERVICE_PACKET_SEQUENCE_ID
        )
        self._sync_marker = header + bytes_field(TracePacket_synchronization_marker_ID, SYNC_MARKER)
        header += varint_field(TracePacket_timestamp_clock_id_ID, BUILTIN_CLOCK_BOOTTIME)
        if machine_id:
            header += varint_field(TracePacket_machine_id_ID, machine_id & 0xFFFFFFFF)
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
        body = varint_field(
            ClockSnapshot_primary_trace_clock_ID, primary_trace_clock or BUILTIN_CLOCK_BOOTTIME
        )
        body += clock_snapshot_clocks(readings)
        return nested_field(TracePacket_clock_snapshot_ID, body) + self._header

    def trace_config(self, serialized_config: bytes) -> bytes:
        """The packet echoing the session's TraceConfig."""
        return self._header + nested_field(TracePacket_trace_config_ID, serialized_config)

    def trace_uuid(self, msb: int, lsb: int) -> bytes:
        """The TraceUuid packet (lsb is written before msb, like upstream)."""
        body = varint_field(TraceUuid_lsb_ID, _int64(lsb)) + varint_field(
            TraceUuid_msb_ID, _int64(msb)
        )
        return self._header + nested_field(TracePacket_trace_uuid_ID, body)

    def system_info(self, info: SystemInfo) -> bytes:
        """The SystemInfo packet."""
        body = bytes_field(
            SystemInfo_tracing_service_version_ID, info.tracing_service_version.encode()
        )
        if info.timezone_off_mins is not None:
            body += varint_field(SystemInfo_timezone_off_mins_ID, _int32(info.timezone_off_mins))
        if info.utsname is not None:
            sysname, version, machine, release = info.utsname
            body += nested_field(
                SystemInfo_utsname_ID,
                bytes_field(Utsname_sysname_ID, sysname.encode())
                + bytes_field(Utsname_version_ID, version.encode())
                + bytes_field(Utsname_machine_ID, machine.encode())
                + bytes_field(Utsname_release_ID, release.encode()),
            )
        if info.page_size is not None:
            body += varint_field(SystemInfo_page_size_ID, info.page_size)
        if info.system_ram_bytes is not None:
            body += varint_field(SystemInfo_system_ram_bytes_ID, info.system_ram_bytes)
        if info.num_cpus is not None:
            body += varint_field(SystemInfo_num_cpus_ID, info.num_cpus)
        return nested_field(TracePacket_system_info_ID, body) + self._header

    def service_event(self, timestamp: int, event: int, value: int = 1) -> bytes:
        """A TracingServiceEvent packet setting oneof member `event` (a field number) to `value`."""
        return (
            varint_field(TracePacket_timestamp_ID, timestamp)
            + self._header
            + nested_field(TracePacket_service_event_ID, varint_field(event, value))
        )

    def trace_provenance(
        self, timestamp: int, buffers: Sequence[Sequence[tuple[int, int]]]
    ) -> bytes:
        """The TraceProvenance packet: per buffer, its (sequence id, producer id) pairs."""
        body = b"".join(
            nested_field(
                TraceProvenance_buffers_ID,
                b"".join(
                    nested_field(
                        TraceProvenance_Buffer_sequences_ID,
                        varint_field(TraceProvenance_Sequence_id_ID, sequence_id)
                        + varint_field(TraceProvenance_Sequence_producer_id_ID, producer),
                    )
                    for sequence_id, producer in sequences
                ),
            )
            for sequences in buffers
        )
        return (
            varint_field(TracePacket_timestamp_ID, timestamp)
            + nested_field(TracePacket_trace_provenance_ID, body)
            + self._header
        )

    def trace_stats(self, serialized_trace_stats: bytes) -> bytes:
        """The TraceStats packet."""
        return self._header + nested_field(TracePacket_trace_stats_ID, serialized_trace_stats)


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
