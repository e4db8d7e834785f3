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

try:
    import cython
except ImportError:  # installed without Cython: runs as pure Python
    from protozero import _cython_shim as cython

if cython.compiled:
    from cython.cimports.cpython.bytes import PyBytes_AS_STRING, PyBytes_FromStringAndSize
    from cython.cimports.libc.string import memcpy

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


class ReplyWriter:
    """ReadBuffersResponse messages written slice by slice as upstream's serializer writes
    them (see the module's docstring): `add_packet` for a packet's slices, then `replies`.
    """

    def __init__(self) -> None:
        # No reply holds more bytes than its estimated size, which stays within the budget
        # unless one slice (at most 64 KiB) is alone in it.
        self._out = bytearray(_REPLY_BUDGET)
        self._used = 0
        self._estimated = 0  # the estimated size of the reply being written
        self._room = 0  # bytes left in the current heap slice of upstream's serializer
        self._replies: list[bytes] = []

    def add_packet(self, packet: Sequence[Slice]) -> None:
        """Appends a packet's slices, each above 64 KiB as several 64 KiB ones."""
        count = len(packet)
        for index in range(count):
            piece = packet[index]
            self._add_span(piece, 0, len(piece), index == count - 1)

    def replies(self) -> list[bytes]:
        """Ends the reply being written (possibly empty) and returns every reply written."""
        self._close()
        return self._replies

    def _add_span(self, source: Slice, start: int, end: int, last: bool) -> None:
        """Appends source[start:end] as the packet's next slice or slices; `last`: the
        packet's last."""
        while end - start > _MAX_SLICE:
            self._add_slice(source, start, start + _MAX_SLICE, False)
            start += _MAX_SLICE
        self._add_slice(source, start, end, last)

    def _add_slice(self, source: Slice, start: int, end: int, last: bool) -> None:
        size = end - start
        # A reply is closed before a slice would push its estimated size past the budget.
        self._estimated += size + _SLICE_OVERHEAD
        if self._estimated > _REPLY_BUDGET and self._used:
            self._close()
            self._estimated = size + _SLICE_OVERHEAD
        room = self._room
        if room == 0:
            room = _HEAP_SLICE
        room -= 1  # the Slice's tag
        if room < _SIZE_FIELD:
            room = _HEAP_SLICE  # the reserved length moves to a new heap slice
        if size <= _MAX_SHORT_DATA and size + _SHORT_FIELDS + _SIZE_FIELD <= room:
            room -= 1 + _SHORT_FIELDS + size
            prefix = _SHORT_PREFIXES[size]
        else:
            room = (room - _SIZE_FIELD - _body_size(size)) % _HEAP_SLICE
            long_prefix = _LONG_PREFIXES.get(size)
            if long_prefix is None:
                long_prefix = _LONG_PREFIXES[size] = _long_prefix(size)
            prefix = long_prefix
        self._room = room
        self._put_bytes(prefix)
        if size:
            self._put_span(source, start, size)
        self._put_bytes(_LAST_SLICE if last else _NOT_LAST_SLICE)

    def _put_bytes(self, data: bytes) -> None:
        used = self._used
        size = len(data)
        if cython.compiled:
            memcpy(cython.address(self._out[used]), PyBytes_AS_STRING(data), size)
        else:
            self._out[used : used + size] = data
        self._used = used + size

    def _put_span(self, source: Slice, start: int, size: int) -> None:
        used = self._used
        if cython.compiled:
            memcpy(cython.address(self._out[used]), cython.address(source[start]), size)
        else:
            self._out[used : used + size] = source[start : start + size]
        self._used = used + size

    def _close(self) -> None:
        if cython.compiled:
            reply = PyBytes_FromStringAndSize(
                cython.cast(cython.p_char, cython.address(self._out[0])), self._used
            )
        else:
            reply = bytes(self._out[: self._used])
        self._replies.append(reply)
        self._used = 0
        self._room = 0


def read_buffers_replies(packets: Iterable[Sequence[Slice]]) -> list[bytes]:
    """The serialized ReadBuffersResponse messages carrying `packets`, in order.

    Every reply but the last goes out with has_more = true; the last one carries the
    read's own has_more, and exists (possibly empty) even when `packets` is empty.
    """
    writer = ReplyWriter()
    for packet in packets:
        writer.add_packet(packet)
    return writer.replies()


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
