"""Draining producer packets out of a TraceBuffer the way ReadBuffers does.

Each packet read is validated (invalid ones are dropped and counted) and gets the
trusted suffix of its sequence appended as a last slice.
"""

from __future__ import annotations

from typing import NamedTuple

from perfetto_service._packet_validator import validate_packet_bytes
from perfetto_service._trace_buffer import TraceBuffer
from perfetto_service._trusted_fields import TrustedFieldsWriter

PacketSlices = list[bytes | bytearray | memoryview]
"""A packet ready to be sent: its slices, trusted suffix last."""


class DrainResult(NamedTuple):
    """What `read_producer_packets` read."""

    packets: list[PacketSlices]
    size: int
    """Sum of the sizes of every slice of `packets`."""
    invalid_packets: int
    """Packets dropped by validation."""
    hit_threshold: bool
    """Whether reading stopped at the byte threshold (more may be left) rather than at the end."""


def read_producer_packets(
    buffer: TraceBuffer, trusted_fields: TrustedFieldsWriter, threshold: int
) -> DrainResult:
    """Starts a read pass on `buffer` and reads packets until `threshold` bytes or the end.

    Like upstream, the threshold is not a hard limit: reading stops right after the packet
    that reaches it.
    """
    buffer.begin_read()
    read_next = buffer.read_next_trace_packet
    suffix_for = trusted_fields.suffix
    packets: list[PacketSlices] = []
    append = packets.append
    total = 0
    invalid = 0
    while total < threshold:
        packet = read_next()
        if packet is None:
            return DrainResult(packets, total, invalid, False)
        slices, sequence, dropped = packet
        if len(slices) == 1:
            body = slices[0]
            if not validate_packet_bytes(body):
                invalid += 1
                continue
            suffix = suffix_for(sequence, dropped)
            total += len(body) + len(suffix)
            append([body, suffix])
            continue
        joined = b"".join(slices)
        if not validate_packet_bytes(joined):
            invalid += 1
            continue
        suffix = suffix_for(sequence, dropped)
        total += len(joined) + len(suffix)
        with_suffix: PacketSlices = list(slices)
        with_suffix.append(suffix)
        append(with_suffix)
    return DrainResult(packets, total, invalid, True)
