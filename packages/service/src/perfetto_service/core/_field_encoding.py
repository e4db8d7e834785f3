"""Protobuf wire-format encoders for the few field shapes the service writes itself."""

from __future__ import annotations

from protozero import (
    MAX_ONE_BYTE_MESSAGE_LENGTH,
    WIRE_TYPE_LENGTH_DELIMITED,
    WIRE_TYPE_VARINT,
    encode_tag,
    encode_varint,
    write_redundant_varint,
)


def varint_field(field_number: int, value: int) -> bytes:
    """A complete varint field."""
    return encode_tag(field_number, WIRE_TYPE_VARINT) + encode_varint(value)


def bytes_field(field_number: int, payload: bytes) -> bytes:
    """A complete length-delimited field with a minimal length varint."""
    return (
        encode_tag(field_number, WIRE_TYPE_LENGTH_DELIMITED) + encode_varint(len(payload)) + payload
    )


def nested_length(size: int) -> bytes:
    """The length prefix upstream's protozero gives a nested message of `size` bytes.

    Upstream's protozero reserves 4 bytes and back-fills a redundant varint, but compacts the prefix
    to one byte when the message turns out to be short (and sits in one contiguous buffer,
    as the service's own messages do).
    """
    if size <= MAX_ONE_BYTE_MESSAGE_LENGTH:
        return encode_varint(size)
    out = bytearray(4)
    write_redundant_varint(out, 0, size)
    return bytes(out)


def nested_field(field_number: int, payload: bytes) -> bytes:
    """A nested message field length-prefixed as protozero does (see `nested_length`)."""
    preamble = encode_tag(field_number, WIRE_TYPE_LENGTH_DELIMITED)
    return preamble + nested_length(len(payload)) + payload
