"""Draining producer packets out of a TraceBuffer the way ReadBuffers does.

Each packet read is validated (invalid ones are dropped and counted) and gets the
trusted suffix of its sequence appended as a last slice. Two outputs: the packets as
slices (for ReadBuffers replies), or directly the bytes of a trace file.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import chain, repeat
from operator import add, sub
from typing import NamedTuple, cast

from perfetto_service._packet_validator import valid_packet_spans
from perfetto_service._read_slicer import PACKET_PREAMBLES, packet_preamble
from perfetto_service._trace_buffer import PacketSpans, TraceBuffer
from perfetto_service._trusted_fields import TrustedFieldsWriter

PacketSlices = tuple[bytes, bytes]
"""A packet ready to be sent: its bytes (a copy, not a view of the buffer), then its trusted
suffix."""


class DrainResult(NamedTuple):
    """What `read_producer_packets` read."""

    packets: list[PacketSlices]
    size: int
    """Sum of the sizes of every slice of `packets`."""
    invalid_packets: int
    """Packets dropped by validation."""
    hit_threshold: bool
    """Whether reading stopped at the byte threshold (more may be left) rather than at the end."""


class TraceDrainResult(NamedTuple):
    """What `read_producer_packets_as_trace` read."""

    trace: bytes
    """The packets, each framed as a `Trace.packet` field."""
    size: int
    """Sum of the packets' sizes (without their framing)."""
    packets: int
    invalid_packets: int
    """Packets dropped by validation."""
    hit_threshold: bool
    """Whether reading stopped at the byte threshold (more may be left) rather than at the end."""


def _packet_suffixes(
    trusted_fields: TrustedFieldsWriter, spans: PacketSpans, valid: list[int]
) -> tuple[bytes, bytes]:
    """(suffix of the first valid packet, suffix of the others) of a run of packets.

    The loss flag goes only on the run's first packet, and only if that one is valid. The
    suffixes are made at a run's first valid packet: that is when a sequence gets its
    trusted_packet_sequence_id, as upstream numbers them.
    """
    suffix = trusted_fields.suffix(spans.sequence, 0)
    if spans.previous_packet_dropped and valid[0] == spans.offsets[0]:
        return trusted_fields.suffix(spans.sequence, spans.previous_packet_dropped), suffix
    return suffix, suffix


def read_producer_packets(
    buffer: TraceBuffer, trusted_fields: TrustedFieldsWriter, threshold: int
) -> DrainResult:
    """Starts a read pass on `buffer` and reads packets until `threshold` bytes or the end.

    Like upstream, the threshold is not a hard limit: reading stops after the packet that
    reaches it, or a little later, at the end of that packet's run in its chunk (packets
    already taken out of the buffer are never left behind).
    """
    buffer.begin_read()
    read_spans = buffer.read_next_packet_spans
    packets: list[PacketSlices] = []
    extend = packets.extend
    total = 0
    invalid = 0
    while total < threshold:
        spans = read_spans(threshold - total)
        if spans is None:
            return DrainResult(packets, total, invalid, False)
        data, offsets = spans.data, spans.offsets
        valid = valid_packet_spans(data, offsets)
        invalid += (len(offsets) - len(valid)) >> 1
        if not valid:
            continue
        first_suffix, suffix = _packet_suffixes(trusted_fields, spans, valid)
        starts = valid[0::2]
        ends = valid[1::2]
        total += sum(ends) - sum(starts) + len(first_suffix) + len(suffix) * (len(starts) - 1)
        # Copies rather than views: as cheap for small packets, and unlike views, not
        # tracked by the garbage collector (thousands of views make it run often).
        copies = map(bytes, map(memoryview(data).__getitem__, map(slice, starts, ends)))
        packets.append((next(copies), first_suffix))
        extend(zip(copies, repeat(suffix)))
    return DrainResult(packets, total, invalid, True)


def read_producer_packets_as_trace(
    buffer: TraceBuffer, trusted_fields: TrustedFieldsWriter, threshold: int
) -> TraceDrainResult:
    """`read_producer_packets` straight into trace-file bytes (for write_into_file)."""
    buffer.begin_read()
    read_spans = buffer.read_next_packet_spans
    preambles = PACKET_PREAMBLES
    parts: list[bytes | bytearray] = []
    extend = parts.extend
    total = 0
    count = 0
    invalid = 0
    hit_threshold = True
    while total < threshold:
        spans = read_spans(threshold - total)
        if spans is None:
            hit_threshold = False
            break
        data, offsets = spans.data, spans.offsets
        valid = valid_packet_spans(data, offsets)
        invalid += (len(offsets) - len(valid)) >> 1
        if not valid:
            continue
        first_suffix, suffix = _packet_suffixes(trusted_fields, spans, valid)
        starts = valid[0::2]
        ends = valid[1::2]
        start = starts[0]
        end = ends[0]
        size = end - start + len(first_suffix)
        extend((packet_preamble(size), data[start:end], first_suffix))
        total += size
        count += len(starts)
        if len(starts) == 1:
            continue
        del starts[0], ends[0]
        sizes = list(map(sub, ends, starts))
        suffix_size = len(suffix)
        total += sum(sizes) + suffix_size * len(sizes)
        if max(sizes) + suffix_size < len(preambles):
            framing = map(preambles.__getitem__, map(add, sizes, repeat(suffix_size)))
        else:
            framing = map(packet_preamble, map(add, sizes, repeat(suffix_size)))
        cuts = map(slice, starts, ends)
        bodies = cast("Iterator[bytes | bytearray]", map(data.__getitem__, cuts))
        extend(chain.from_iterable(zip(framing, bodies, repeat(suffix))))
    return TraceDrainResult(b"".join(parts), total, count, invalid, hit_threshold)
