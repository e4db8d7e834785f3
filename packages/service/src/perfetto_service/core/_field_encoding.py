"""Protobuf wire-format encoders for the few field shapes the service writes itself."""

from __future__ import annotations

from protozero import (
    WIRE_TYPE_LENGTH_DELIMITED,
    WIRE_TYPE_VARINT,
    encode_tag,
    encode_varint,
    write_redundant_varint,
)

# One-byte varints are by far the most common; encode them once.
_SMALL_VARINTS: tuple[bytes, ...] = tuple(bytes((i,)) for i in range(128))


def varint(value: int) -> bytes:
    """Encodes `value` as a minimal varint; negative values as 64-bit two's complement."""
    if 0 <= value < 128:
        return _SMALL_VARINTS[value]
    return encode_varint(value)


def redundant_varint4(value: int) -> bytes:
    """Encodes `value` (< 2**28) as the 4-byte redundant varint protozero uses for lengths."""
    out = bytearray(4)
    write_redundant_varint(out, 0, value)
    return bytes(out)


def varint_field(field_number: int, value: int) -> bytes:
    """A complete varint field."""
    return encode_tag(field_number, WIRE_TYPE_VARINT) + varint(value)


def bytes_field(field_number: int, payload: bytes) -> bytes:
    """A complete length-delimited field with a minimal length varint."""
    return encode_tag(field_number, WIRE_TYPE_LENGTH_DELIMITED) + varint(len(payload)) + payload


MAX_ONE_BYTE_MESSAGE_LENGTH = 127
"""Upstream's protozero gives nested messages up to this size a 1-byte length, others 4 bytes."""


def nested_length(size: int) -> bytes:
    """The length prefix upstream's protozero gives a nested message of `size` bytes.

    Upstream's protozero reserves 4 bytes and back-fills a redundant varint, but compacts the prefix
    to one byte when the message turns out to be short (and sits in one contiguous buffer,
    as the service's own messages do).
    """
    if size <= MAX_ONE_BYTE_MESSAGE_LENGTH:
        return _SMALL_VARINTS[size]
    return redundant_varint4(size)


def nested_field(field_number: int, payload: bytes) -> bytes:
    """A nested message field length-prefixed as protozero does (see `nested_length`)."""
    preamble = encode_tag(field_number, WIRE_TYPE_LENGTH_DELIMITED)
    return preamble + nested_length(len(payload)) + payload
