"""Validation of producer-written TracePackets before the service emits them.

A producer packet is dropped when it is not well-formed protobuf at its top level
(malformed or over-long varints, group or unknown wire types, a length above
0x0FFFFFFF, truncation) or when it sets a field only the service may write. Unlike
upstream, a field number of 0 or above 2**29 - 1 is refused too: protobuf parsers reject
the whole trace over such a field.
"""

from __future__ import annotations

from collections.abc import Sequence

try:
    import cython
except ImportError:  # installed without Cython: runs as pure Python
    from protozero import _cython_shim as cython

if not cython.compiled:  # compiled, _packet_validator.pxd cimports it from protozero
    from protozero._decoder import read_varint

SERVICE_RESERVED_FIELDS: frozenset[int] = frozenset(
    {3, 10, 33, 35, 36, 50, 69, 79, 98, 124, 125, 133}
)
"""TracePacket fields a producer may not write: trusted ids, service packets, compression."""

MAX_MESSAGE_LENGTH = 0x0FFFFFFF
"""The largest length a length-delimited field may declare (protozero's kMaxMessageLength)."""

_MAX_FIELD_NUMBER = (1 << 29) - 1
_MAX_VARINT_BYTES = 10

_VARINT = 0
_FIXED64 = 1
_LENGTH_DELIMITED = 2
_FIXED32 = 5
_REJECT = -1


def _tag_action(tag: int) -> int:
    field_number = tag >> 3
    wire_type = tag & 7
    if (
        field_number == 0
        or field_number > _MAX_FIELD_NUMBER
        or field_number in SERVICE_RESERVED_FIELDS
    ):
        return _REJECT
    if wire_type in (_VARINT, _FIXED64, _LENGTH_DELIMITED, _FIXED32):
        return wire_type
    return _REJECT


# What to do for every one-byte tag (fields 1-15), looked up instead of decoded.
_ONE_BYTE_TAGS: tuple[int, ...] = tuple(_tag_action(tag) for tag in range(0x80))


def validate_packet(slices: Sequence[bytes | bytearray | memoryview]) -> bool:
    """Whether the packet made of `slices` may be emitted (see the module docstring)."""
    return validate_packet_bytes(slices[0] if len(slices) == 1 else b"".join(slices))


def validate_packet_bytes(data: bytes | bytearray | memoryview) -> bool:
    """`validate_packet` for a packet held in one buffer."""
    return validate_packet_span(data, 0, len(data))


def validate_packet_span(data: bytes | bytearray | memoryview, pos: int, end: int) -> bool:
    """`validate_packet` for the packet held in data[pos:end]."""
    return len(valid_packet_spans(data, [pos, end])) == 2


def _read_varint(buf: bytes | bytearray | memoryview, pos: int, end: int) -> tuple[int, int]:
    """The varint at buf[pos:end]: (value, position after it), position -1 if malformed.

    A varint whose value does not fit in 64 bits is malformed: as a tag or a length it
    could only be refused.
    """
    value, following = read_varint(buf, pos, end)
    if following - pos == _MAX_VARINT_BYTES and buf[following - 1] > 1:
        return 0, -1
    return value, following


def valid_packet_spans(data: bytes | bytearray | memoryview, offsets: list[int]) -> list[int]:
    """The spans of the valid packets among those at `offsets` in `data`, in one pass.

    Packet i is data[offsets[2 * i] : offsets[2 * i + 1]]. Returns the flattened
    (start, end) offsets of the packets `validate_packet` accepts: `offsets` itself when
    it accepts all of them. A span outside `data` is not a valid packet.
    """
    buf = data
    size = len(buf)
    one_byte_tags = _ONE_BYTE_TAGS
    valid: list[int] | None = None
    for index in range(0, len(offsets), 2):
        pos = offsets[index]
        end = offsets[index + 1]
        if not 0 <= pos <= end <= size:
            pos = end + 1
        while pos < end:
            if buf[pos] < 0x80:
                action = one_byte_tags[buf[pos]]
                pos += 1
            else:
                tag, pos = _read_varint(buf, pos, end)
                if pos < 0:
                    break
                action = _tag_action(tag)
            if action == _VARINT:
                limit = min(pos + _MAX_VARINT_BYTES, end)
                while pos < limit and buf[pos] >= 0x80:
                    pos += 1
                if pos >= limit:
                    # Longer than 10 bytes, or running past the packet's end.
                    pos = -1
                    break
                pos += 1
            elif action == _LENGTH_DELIMITED:
                if pos < end and buf[pos] < 0x80:
                    pos += buf[pos] + 1
                else:
                    length, pos = _read_varint(buf, pos, end)
                    if pos < 0 or length > MAX_MESSAGE_LENGTH:
                        pos = -1
                        break
                    pos += length
            elif action == _FIXED64:
                pos += 8
            elif action == _FIXED32:
                pos += 4
            else:
                pos = -1
                break
        if pos != end:
            if valid is None:
                valid = offsets[:index]
        elif valid is not None:
            valid.append(offsets[index])
            valid.append(end)
    return offsets if valid is None else valid
