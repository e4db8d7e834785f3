"""Draining producer packets out of a TraceBuffer the way ReadBuffers does.

Each packet read is validated (invalid ones are dropped and counted) and gets the
trusted suffix of its sequence appended as a last slice.
"""

from __future__ import annotations

from typing import NamedTuple

from perfetto_service._packet_validator import validate_packet_bytes
from perfetto_service._trace_buffer import TraceBuffer
from perfetto_service._trusted_fields import TrustedFieldsWriter

PacketSlices = tuple[memoryview, bytes]
"""A packet ready to be sent: its bytes, then its trusted suffix."""


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

    Like upstream, the threshold is not a hard limit: reading stops after the packet that
    reaches it, or a little later, at the end of that packet's run in its chunk (packets
    already taken out of the buffer are never left behind).
    """
    buffer.begin_read()
    read_run = buffer.read_next_packets
    suffix_for = trusted_fields.suffix
    validate = validate_packet_bytes
    packets: list[PacketSlices] = []
    append = packets.append
    total = 0
    invalid = 0
    while total < threshold:
        run = read_run(threshold - total)
        if run is None:
            return DrainResult(packets, total, invalid, False)
        run_packets, sequence, dropped = run
        suffix = suffix_for(sequence, 0)
        first_suffix = suffix_for(sequence, dropped) if dropped else suffix
        for body in run_packets:
            if validate(body):
                total += len(body) + len(first_suffix)
                append((body, first_suffix))
            else:
                invalid += 1
            first_suffix = suffix
    return DrainResult(packets, total, invalid, True)
