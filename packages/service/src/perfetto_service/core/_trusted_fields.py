"""The trusted suffix the service appends to every producer packet it emits.

In order: trusted_uid (f3), trusted_packet_sequence_id (f10), trusted_pid (f79) when
known, machine_id (f98) when not 0, previous_packet_dropped (f42) when not 0. Appending
(never prepending) makes these values win over anything the producer wrote, and the
validator already refused packets that write them.
"""

from __future__ import annotations

from perfetto_protos.tags.fields import (
    TracePacket_machine_id_ID,
    TracePacket_previous_packet_dropped_TAG,
    TracePacket_trusted_packet_sequence_id_ID,
    TracePacket_trusted_pid_ID,
    TracePacket_trusted_uid_ID,
)
from protozero import encode_varint

from perfetto_service.core._field_encoding import varint_field
from perfetto_service.core._trace_buffer import PacketSequenceProperties

SERVICE_PACKET_SEQUENCE_ID = 1
"""trusted_packet_sequence_id of the service's own packets."""

_PREVIOUS_PACKET_DROPPED_TAG = encode_varint(TracePacket_previous_packet_dropped_TAG)
_DROPPED_ONE = _PREVIOUS_PACKET_DROPPED_TAG + encode_varint(1)


def _int32(value: int) -> int:
    """Wraps `value` to a signed 32-bit integer, as a cast to int32_t would."""
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


class TrustedFieldsWriter:
    """Numbers packet sequences and builds the trusted suffix of each producer packet.

    One instance per tracing session: sequence ids are numbered from 2, per
    (machine, producer, writer), in the order the sequences are first read.
    """

    def __init__(self) -> None:
        self._sequence_ids: dict[tuple[int, int, int], int] = {}
        self._prefixes: dict[PacketSequenceProperties, bytes] = {}
        self._last_sequence_id = SERVICE_PACKET_SEQUENCE_ID

    def sequence_id(self, machine_id: int, producer_id: int, writer_id: int) -> int:
        """The trusted_packet_sequence_id of a sequence, assigning the next one if new."""
        key = (machine_id, producer_id, writer_id)
        sequence_id = self._sequence_ids.get(key)
        if sequence_id is None:
            self._last_sequence_id += 1
            sequence_id = self._sequence_ids[key] = self._last_sequence_id
        return sequence_id

    def suffix(self, sequence: PacketSequenceProperties, previous_packet_dropped: int) -> bytes:
        """The bytes to append to a packet read from `sequence`."""
        prefix = self._prefixes.get(sequence)
        if prefix is None:
            prefix = self._prefixes[sequence] = self._encode_prefix(sequence)
        if not previous_packet_dropped:
            return prefix
        if previous_packet_dropped == 1:
            return prefix + _DROPPED_ONE
        return prefix + _PREVIOUS_PACKET_DROPPED_TAG + encode_varint(previous_packet_dropped)

    def _encode_prefix(self, sequence: PacketSequenceProperties) -> bytes:
        parts = [
            varint_field(TracePacket_trusted_uid_ID, _int32(sequence.producer_uid)),
            varint_field(
                TracePacket_trusted_packet_sequence_id_ID,
                self.sequence_id(sequence.machine_id, sequence.producer_id, sequence.writer_id),
            ),
        ]
        if sequence.producer_pid is not None:
            parts.append(varint_field(TracePacket_trusted_pid_ID, _int32(sequence.producer_pid)))
        if sequence.machine_id:
            parts.append(varint_field(TracePacket_machine_id_ID, sequence.machine_id & 0xFFFFFFFF))
        return b"".join(parts)
