"""Protobuf wire-format encoders for the few field shapes the service writes itself."""

from __future__ import annotations

_U64_MASK = (1 << 64) - 1

# One-byte varints are by far the most common; encode them once.
_SMALL_VARINTS: tuple[bytes, ...] = tuple(bytes((i,)) for i in range(128))

WIRE_VARINT = 0
WIRE_FIXED64 = 1
WIRE_LENGTH_DELIMITED = 2
WIRE_FIXED32 = 5


def varint(value: int) -> bytes:
    """Encodes `value` as a minimal varint; negative values as 64-bit two's complement."""
    if 0 <= value < 128:
        return _SMALL_VARINTS[value]
    value &= _U64_MASK
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def redundant_varint4(value: int) -> bytes:
    """Encodes `value` (< 2**28) as the 4-byte redundant varint protozero uses for lengths."""
    return bytes(
        (
            (value & 0x7F) | 0x80,
            ((value >> 7) & 0x7F) | 0x80,
            ((value >> 14) & 0x7F) | 0x80,
            (value >> 21) & 0x7F,
        )
    )


def tag(field_number: int, wire_type: int) -> bytes:
    """The preamble (key) of field `field_number` with `wire_type`."""
    return varint((field_number << 3) | wire_type)


def varint_field(field_number: int, value: int) -> bytes:
    """A complete varint field."""
    return tag(field_number, WIRE_VARINT) + varint(value)


def bytes_field(field_number: int, payload: bytes) -> bytes:
    """A complete length-delimited field with a minimal length varint."""
    return tag(field_number, WIRE_LENGTH_DELIMITED) + varint(len(payload)) + payload


MAX_ONE_BYTE_MESSAGE_LENGTH = 127
"""Nested messages up to this size get a 1-byte length from protozero; larger ones 4 bytes."""


def nested_length(size: int) -> bytes:
    """The length prefix protozero gives a nested message of `size` bytes.

    protozero reserves 4 bytes and back-fills a redundant varint, but compacts the prefix
    to one byte when the message turns out to be short (and sits in one contiguous buffer,
    as the service's own messages do).
    """
    if size <= MAX_ONE_BYTE_MESSAGE_LENGTH:
        return _SMALL_VARINTS[size]
    return redundant_varint4(size)


def nested_field(field_number: int, payload: bytes) -> bytes:
    """A nested message field length-prefixed as protozero does (see `nested_length`)."""
    return tag(field_number, WIRE_LENGTH_DELIMITED) + nested_length(len(payload)) + payload
