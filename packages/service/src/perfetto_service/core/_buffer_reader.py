"""Draining producer packets out of a TraceBuffer the way ReadBuffers does.

Each packet read is validated (invalid ones are dropped and counted) and gets the
trusted suffix of its sequence appended as a last slice. Three outputs: the packets as
slices, the ReadBuffers replies written straight from the buffer (no object per packet), or
directly the bytes of a trace file.
"""

from __future__ import annotations

from typing import NamedTuple

try:
    import cython
except ImportError:  # installed without Cython: runs as pure Python
    from protozero import _cython_shim as cython

from perfetto_service.core._packet_validator import valid_packet_spans
from perfetto_service.core._read_slicer import PACKET_PREAMBLES, packet_preamble
from perfetto_service.core._trace_buffer import PacketSpans, TraceBuffer
from perfetto_service.core._trusted_fields import TrustedFieldsWriter

if not cython.compiled:  # compiled, the .pxd cimports it
    from perfetto_service.core._read_slicer import ReplyWriter

if cython.compiled:
    from cython.cimports.cpython.bytearray import PyByteArray_Resize
    from cython.cimports.cpython.bytes import PyBytes_AS_STRING, PyBytes_FromStringAndSize
    from cython.cimports.libc.string import memcpy
    from cython.cimports.perfetto_protos.tags.fields_c import Trace_packet_TAG
    from cython.cimports.protozero._proto_utils import store_varint

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


class ReplyDrainResult(NamedTuple):
    """What `read_producer_packets_as_replies` read."""

    size: int
    """Sum of the packets' sizes, suffixes included."""
    packets: int
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


def _append_copies(
    packets: list[PacketSlices],
    data: memoryview | bytes,
    valid: list[int],
    first: bytes,
    rest: bytes,
) -> int:
    """Appends (copy of the packet, suffix) to `packets` for the packets at `valid` in `data`.

    The first packet gets the suffix `first`, the others `rest`. `valid` holds spans inside
    `data` (as `valid_packet_spans` returns them). Returns the sum of the packets' sizes,
    suffixes included.
    """
    total = 0
    suffix = first
    source = data
    view = memoryview(data)
    for i in range(0, len(valid), 2):
        start = valid[i]
        end = valid[i + 1]
        total += end - start + len(suffix)
        # A copy rather than a view: as cheap for small packets, and unlike views, not
        # tracked by the garbage collector (thousands of views make it run often).
        if cython.compiled:
            packet = PyBytes_FromStringAndSize(
                cython.cast(cython.p_char, cython.address(source[start])), end - start
            )
        else:
            packet = bytes(view[start:end])
        packets.append((packet, suffix))
        suffix = rest
    return total


def _append_slices(
    writer: ReplyWriter, data: memoryview | bytes, valid: list[int], first: bytes, rest: bytes
) -> int:
    """Appends the packets at `valid` in `data` to `writer`, each followed by its suffix.

    The first packet gets the suffix `first`, the others `rest`. `valid` holds spans inside
    `data` (as `valid_packet_spans` returns them). Returns the sum of the packets' sizes,
    suffixes included.
    """
    source = data
    first_suffix = first
    rest_suffix = rest
    suffix = first_suffix
    suffix_size = len(first)
    total = 0
    for i in range(0, len(valid), 2):
        start = valid[i]
        end = valid[i + 1]
        total += end - start + suffix_size
        writer._add_span(source, start, end, False)
        writer._add_span(suffix, 0, suffix_size, True)
        suffix = rest_suffix
        suffix_size = len(rest)
    return total


def _append_framed(
    out: bytearray, data: memoryview | bytes, valid: list[int], first: bytes, rest: bytes
) -> int:
    """Appends the packets at `valid` in `data` to `out` as `Trace.packet` fields.

    The first packet gets the suffix `first`, the others `rest`. `valid` holds spans inside
    `data` (as `valid_packet_spans` returns them). Returns the sum of the packets' sizes,
    suffixes included.
    """
    total = 0
    suffix = first
    if cython.compiled:
        # Room for every packet and suffix, plus a tag and a 10-byte varint each.
        old_size = len(out)
        room = (len(valid) >> 1) * (11 + max(len(first), len(rest)))
        for i in range(0, len(valid), 2):
            room += valid[i + 1] - valid[i]
        PyByteArray_Resize(out, old_size + room)
        view = out
        source = data
        p = old_size
        for i in range(0, len(valid), 2):
            start = valid[i]
            length = valid[i + 1] - start
            size = length + len(suffix)
            total += size
            view[p] = Trace_packet_TAG
            p = store_varint(view, p + 1, size)
            memcpy(cython.address(view[p]), cython.address(source[start]), length)
            p += length
            memcpy(cython.address(view[p]), PyBytes_AS_STRING(suffix), len(suffix))
            p += len(suffix)
            suffix = rest
        # Releases `out`, which cannot be resized while exported.
        view = None  # type: ignore[assignment]
        PyByteArray_Resize(out, p)
        return total
    preambles = PACKET_PREAMBLES
    cached = len(preambles)
    for i in range(0, len(valid), 2):
        start = valid[i]
        end = valid[i + 1]
        size = end - start + len(suffix)
        total += size
        out += preambles[size] if size < cached else packet_preamble(size)
        out += data[start:end]
        out += suffix
        suffix = rest
    return total


def _drain(
    buffer: TraceBuffer,
    trusted_fields: TrustedFieldsWriter,
    threshold: int,
    sink: list[PacketSlices] | ReplyWriter | bytearray,
) -> tuple[int, int, int, bool]:
    """Starts a read pass on `buffer` and appends valid packets to `sink` until `threshold`
    bytes or the end: to a list as `PacketSlices`, to a `ReplyWriter`, or to a bytearray as
    `Trace.packet` fields.

    Returns (sum of the packets' sizes with their suffixes, packets, packets dropped by
    validation, whether reading stopped at the threshold). Like upstream, the threshold is not
    a hard limit: reading stops after the packet that reaches it, or a little later, at the end
    of that packet's run in its chunk (packets already taken out of the buffer are never left
    behind).
    """
    buffer.begin_read()
    read_spans = buffer.read_next_packet_spans
    total = 0
    count = 0
    invalid = 0
    while total < threshold:
        spans = read_spans(threshold - total)
        if spans is None:
            return total, count, invalid, False
        data, offsets = spans.data, spans.offsets
        valid = valid_packet_spans(data, offsets)
        invalid += (len(offsets) - len(valid)) >> 1
        if not valid:
            continue
        first, rest = _packet_suffixes(trusted_fields, spans, valid)
        count += len(valid) >> 1
        if isinstance(sink, list):
            total += _append_copies(sink, data, valid, first, rest)
        elif isinstance(sink, bytearray):
            total += _append_framed(sink, data, valid, first, rest)
        else:
            total += _append_slices(sink, data, valid, first, rest)
    return total, count, invalid, True


def read_producer_packets(
    buffer: TraceBuffer, trusted_fields: TrustedFieldsWriter, threshold: int
) -> DrainResult:
    """Starts a read pass on `buffer` and reads packets until `threshold` bytes or the end
    (`_drain`'s threshold)."""
    packets: list[PacketSlices] = []
    total, _, invalid, hit_threshold = _drain(buffer, trusted_fields, threshold, packets)
    return DrainResult(packets, total, invalid, hit_threshold)


def read_producer_packets_as_replies(
    buffer: TraceBuffer, trusted_fields: TrustedFieldsWriter, threshold: int, writer: ReplyWriter
) -> ReplyDrainResult:
    """`read_producer_packets` straight into ReadBuffers replies: each packet's bytes and
    suffix go into `writer` as they are read."""
    return ReplyDrainResult(*_drain(buffer, trusted_fields, threshold, writer))


def read_producer_packets_as_trace(
    buffer: TraceBuffer, trusted_fields: TrustedFieldsWriter, threshold: int
) -> TraceDrainResult:
    """`read_producer_packets` straight into trace-file bytes (for write_into_file)."""
    out = bytearray()
    total, count, invalid, hit_threshold = _drain(buffer, trusted_fields, threshold, out)
    return TraceDrainResult(bytes(out), total, count, invalid, hit_threshold)
