"""Serializing read packets for a consumer: ReadBuffers replies, or trace-file bytes.

A packet is a sequence of slices (its bytes, then the trusted suffix). Over IPC every
slice becomes one ReadBuffersResponse.Slice, in order, never interleaved with another
packet's; a reply is closed before a slice would push its estimated size (each slice's
size + 16) past 131072 - 64 bytes. A slice too big for one reply (a packet reassembled
from many chunks) is sent as several consecutive slices. In a file every packet is one
`Trace.packet` field: 0x0A, the varint length, then the slices. Both forms carry the same
bytes.

Upstream's traced serializes each reply on its own, through ProtoZero into 4 KiB heap
slices: a Slice's length is one byte when the Slice has at most 127 bytes and lies, with
the 4 bytes reserved for its length, within one heap slice; otherwise it is a 4-byte
redundant varint. The replies carry the same lengths.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from perfetto_protos.tags.fields import (
    ReadBuffersResponse_Slice_data_TAG,
    ReadBuffersResponse_Slice_last_slice_for_packet_TAG,
    ReadBuffersResponse_slices_TAG,
    Trace_packet_TAG,
)
from protozero import encode_varint, write_redundant_varint

IPC_BUFFER_SIZE = 131072
"""Largest IPC frame, length prefix included (kIPCBufferSize)."""

_SLICE_OVERHEAD = 16
_REPLY_OVERHEAD = 64
_REPLY_BUDGET = IPC_BUFFER_SIZE - _REPLY_OVERHEAD
_MAX_SLICE = 1 << 16
_HEAP_SLICE = 4096  # upstream serializes a reply into heap slices of this size
_SIZE_FIELD = 4  # bytes ProtoZero reserves for a nested message's length
_MAX_SHORT_DATA = 123  # the most data a Slice with a 1-byte length (127 bytes) carries
_SHORT_FIELDS = 4  # a Slice's bytes besides data of at most 127 bytes
_SLICES_TAG = encode_varint(ReadBuffersResponse_slices_TAG)
_DATA_TAG = encode_varint(ReadBuffersResponse_Slice_data_TAG)
_LAST_SLICE = encode_varint(ReadBuffersResponse_Slice_last_slice_for_packet_TAG) + encode_varint(1)
_NOT_LAST_SLICE = encode_varint(
    ReadBuffersResponse_Slice_last_slice_for_packet_TAG
) + encode_varint(0)
_TRACE_PACKET_TAG = encode_varint(Trace_packet_TAG)

Slice = bytes | bytearray | memoryview
"""One piece of a packet."""


def _body_size(size: int) -> int:
    """Bytes of the Slice message carrying `size` bytes of data (at most 64 KiB)."""
    return size + (4 if size < 0x80 else 5 if size < 0x4000 else 6)


def _long_prefix(size: int) -> bytes:
    """What precedes the data of a `size`-byte slice whose Slice has a 4-byte length."""
    length = bytearray(_SIZE_FIELD)
    write_redundant_varint(length, 0, _body_size(size))
    return _SLICES_TAG + bytes(length) + _DATA_TAG + encode_varint(size)


# What precedes the data of a slice whose Slice has a 1-byte length, by slice size.
_SHORT_PREFIXES: tuple[bytes, ...] = tuple(
    _SLICES_TAG + bytes((_body_size(size),)) + _DATA_TAG + bytes((size,))
    for size in range(_MAX_SHORT_DATA + 1)
)
# Prefixes of slices whose Slice has a 4-byte length, by slice size, built as sizes are
# first seen (slices are at most 64 KiB).
_LONG_PREFIXES: dict[int, bytes] = {}
# The last_slice_for_packet values of the slices of a packet, by its number of slices.
_LAST_FLAGS: tuple[tuple[bytes, ...], ...] = tuple(
    (_NOT_LAST_SLICE,) * (n - 1) + (_LAST_SLICE,) if n else () for n in range(65)
)


def _split(packet: Sequence[Slice]) -> Sequence[Slice]:
    """`packet` with every slice above 64 KiB cut into 64 KiB pieces."""
    pieces: list[Slice] = []
    for piece in packet:
        view = memoryview(piece)
        pieces.extend(view[i : i + _MAX_SLICE] for i in range(0, len(view), _MAX_SLICE))
    return pieces


def _replies(packets: list[Sequence[Slice]]) -> list[bytes] | None:
    """The serialized ReadBuffersResponse messages carrying `packets`, or None if a slice
    is above 64 KiB."""
    short_prefixes = _SHORT_PREFIXES
    long_prefixes = _LONG_PREFIXES
    last_flags = _LAST_FLAGS
    replies: list[bytes] = []
    parts: list[Slice] = []
    estimated = 0  # the estimated size of the reply being built
    room = 0  # bytes left in the current heap slice of upstream's serializer
    for packet in packets:
        count = len(packet)
        if count < len(last_flags):
            flags = last_flags[count]
        else:
            flags = (_NOT_LAST_SLICE,) * (count - 1) + (_LAST_SLICE,)
        for index in range(count):
            piece = packet[index]
            size = len(piece)
            if size > _MAX_SLICE:
                return None
            # A reply is closed before a slice would push its estimated size past the budget.
            estimated += size + _SLICE_OVERHEAD
            if estimated > _REPLY_BUDGET and parts:
                replies.append(b"".join(parts))
                parts = []
                estimated = size + _SLICE_OVERHEAD
                room = 0
            if room == 0:
                room = _HEAP_SLICE
            room -= 1  # the Slice's tag
            if room < _SIZE_FIELD:
                room = _HEAP_SLICE  # the reserved length moves to a new heap slice
            if size <= _MAX_SHORT_DATA and size + _SHORT_FIELDS + _SIZE_FIELD <= room:
                room -= 1 + _SHORT_FIELDS + size
                parts.append(short_prefixes[size])
            else:
                room = (room - _SIZE_FIELD - _body_size(size)) % _HEAP_SLICE
                prefix = long_prefixes.get(size)
                if prefix is None:
                    prefix = long_prefixes[size] = _long_prefix(size)
                parts.append(prefix)
            parts.append(piece)
            parts.append(flags[index])
    replies.append(b"".join(parts))
    return replies


def read_buffers_replies(packets: Iterable[Sequence[Slice]]) -> list[bytes]:
    """The serialized ReadBuffersResponse messages carrying `packets`, in order.

    Every reply but the last goes out with has_more = true; the last one carries the
    read's own has_more, and exists (possibly empty) even when `packets` is empty.
    """
    packets = list(packets)
    replies = _replies(packets)
    if replies is None:
        replies = _replies(
            [
                _split(packet) if max(map(len, packet), default=0) > _MAX_SLICE else packet
                for packet in packets
            ]
        )
        assert replies is not None
    return replies


# Built byte by byte (0x0A, then a one- or two-byte varint): a third of the import cost of
# calling the varint encoder 16384 times.
PACKET_PREAMBLES: tuple[bytes, ...] = tuple(
    [bytes((0x0A, n)) for n in range(0x80)]
    + [bytes((0x0A, 0x80 | (n & 0x7F), n >> 7)) for n in range(0x80, 1 << 14)]
)
"""`packet_preamble` of every size below 16 KiB, the sizes nearly every packet has."""


def packet_preamble(packet_size: int) -> bytes:
    """The bytes preceding a packet of `packet_size` bytes in a trace file."""
    if packet_size < len(PACKET_PREAMBLES):
        return PACKET_PREAMBLES[packet_size]
    return _TRACE_PACKET_TAG + encode_varint(packet_size)


def trace_file_bytes(packets: Iterable[Sequence[Slice]]) -> bytes:
    """`packets` as a trace file (a serialized `Trace`) fragment."""
    parts: list[Slice] = []
    preambles = PACKET_PREAMBLES
    limit = len(preambles)
    for packet in packets:
        size = 0
        for piece in packet:
            size += len(piece)
        parts.append(preambles[size] if size < limit else packet_preamble(size))
        parts.extend(packet)
    return b"".join(parts)
