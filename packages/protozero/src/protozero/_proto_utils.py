"""Wire-format constants and small encoders shared by the writer, the decoder and the generator."""

from __future__ import annotations

import mmap
import struct
from typing import Final

from protozero._errors import ProtozeroError

WritableBuffer = bytearray | mmap.mmap | memoryview
"""Anything the writer can store bytes into with `buf[i] = b` and `buf[a:b] = data`."""

WIRE_TYPE_VARINT: Final = 0
WIRE_TYPE_FIXED64: Final = 1
WIRE_TYPE_LENGTH_DELIMITED: Final = 2
WIRE_TYPE_START_GROUP: Final = 3
WIRE_TYPE_END_GROUP: Final = 4
WIRE_TYPE_FIXED32: Final = 5

MESSAGE_LENGTH_FIELD_SIZE: Final = 4
"""Bytes reserved for the size of a nested message (a redundant varint)."""

MAX_MESSAGE_LENGTH: Final = (1 << (7 * MESSAGE_LENGTH_FIELD_SIZE)) - 1
"""The largest size a 4-byte redundant varint can hold (256 MiB - 1)."""

MAX_FIELD_ID: Final = (1 << 29) - 1

UINT64_MASK: Final = 0xFFFF_FFFF_FFFF_FFFF


def _two_byte_strings(first: bytes, second: bytes) -> tuple[bytes, ...]:
    """The strings `bytes((first[i], second[i]))` for every i.

    One `struct.unpack` of the interleaved bytes makes them: making the 16,384 strings one by
    one took about 6 ms of every program that imports protozero.
    """
    # A memoryview: compiled, Cython would require bytearray's slices to be given bytearrays.
    interleaved = memoryview(bytearray(2 * len(first)))
    interleaved[0::2] = first
    interleaved[1::2] = second
    return struct.unpack("2s" * len(first), interleaved)


def _each_128_times(values: range) -> bytes:
    """Each of `values` (bytes) repeated 128 times, in order."""
    return b"".join(bytes((v,)) * 128 for v in values)


_LOW_GROUPS = bytes(range(0x80, 0x100)) * 128
"""`(v & 0x7F) | 0x80` for every v below 2**14: a first byte with the continuation bit."""

SHORT_VARINTS: Final[tuple[bytes, ...]] = tuple(bytes((v,)) for v in range(0x80)) + (
    _two_byte_strings(_LOW_GROUPS[0x80:], _each_128_times(range(1, 0x80)))
)
"""The varint encoding of every value below 2**14 (1 or 2 bytes), indexed by value."""

VARINT_PAIRS: Final[tuple[bytes, ...]] = _two_byte_strings(
    _LOW_GROUPS, _each_128_times(range(0x80, 0x100))
)
"""Two 7-bit groups of a longer varint, both with the continuation bit: `v & 0x3FFF` -> bytes.

Generated setters encode a varint as `VARINT_PAIRS[v & 0x3FFF] + ... + SHORT_VARINTS[rest]`:
a few table lookups instead of a Python loop over its bytes.
"""


PACK_FIXED32: Final = struct.Struct("<I").pack
"""The 4 little-endian bytes of a fixed32 value (0 <= value < 2**32)."""
PACK_FIXED64: Final = struct.Struct("<Q").pack
"""The 8 little-endian bytes of a fixed64 value (0 <= value < 2**64)."""
PACK_FLOAT: Final = struct.Struct("<f").pack
"""The 4 bytes of a float field's value (IEEE 754)."""
PACK_DOUBLE: Final = struct.Struct("<d").pack
"""The 8 bytes of a double field's value (IEEE 754)."""


def make_tag(field_id: int, wire_type: int) -> int:
    """The numeric tag (field id and wire type) that precedes a field on the wire."""
    if not 0 < field_id <= MAX_FIELD_ID:
        raise ProtozeroError(f"field id {field_id} is out of range 1..{MAX_FIELD_ID}")
    return (field_id << 3) | wire_type


def store_varint(view: WritableBuffer, p: int, value: int) -> int:
    """Stores the shortest varint encoding of `value` (0 <= value < 2**64) at `view[p]`.

    Returns the position after it. The caller makes sure 10 bytes fit. Compiled modules of any
    package cimport it (with a typed memoryview); it is the one varint encoder.
    """
    while value > 0x7F:
        view[p] = (value & 0x7F) | 0x80
        value >>= 7
        p += 1
    view[p] = value
    return p + 1


def varint_size(value: int) -> int:
    """The size in bytes of the shortest varint encoding of `value` (0 <= value < 2**64)."""
    return max(1, (value.bit_length() + 6) // 7)


def store_redundant_varint(view: WritableBuffer, p: int, value: int, size: int) -> int:
    """Stores `value` as a varint padded to exactly `size` bytes at `view[p]`, unchecked.

    Returns the position after it. `value` must fit (see `write_redundant_varint`).
    """
    last = p + size - 1
    while p < last:
        view[p] = (value & 0x7F) | 0x80
        value >>= 7
        p += 1
    view[p] = value & 0x7F
    return p + 1


def encode_varint(value: int) -> bytes:
    """The shortest varint encoding of `value` (negative values as 64-bit two's complement)."""
    value &= UINT64_MASK
    if value < 0x4000:
        return SHORT_VARINTS[value]
    out = bytearray(10)
    return bytes(out[: store_varint(out, 0, value)])


def encode_tag(field_id: int, wire_type: int) -> bytes:
    """The encoded tag bytes for a field; generated code keeps these as constants."""
    return encode_varint(make_tag(field_id, wire_type))


def zigzag_encode(value: int) -> int:
    """Maps a signed 64-bit integer to the unsigned value sint32/sint64 fields store."""
    return ((value << 1) ^ (value >> 63)) & UINT64_MASK


def zigzag_decode(value: int) -> int:
    """The inverse of `zigzag_encode`."""
    return (value >> 1) ^ -(value & 1)


def write_redundant_varint(
    buf: WritableBuffer, offset: int, value: int, size: int = MESSAGE_LENGTH_FIELD_SIZE
) -> None:
    """Writes `value` as a varint padded to exactly `size` bytes at `buf[offset]`.

    Every byte but the last has its continuation bit set, so readers see one varint of `size`
    bytes whatever the value (e.g. 7 in 4 bytes is `87 80 80 00`).
    """
    if value < 0 or not 0 < size <= 9 or value >> (7 * size):
        raise ProtozeroError(f"{value} does not fit a {size}-byte redundant varint")
    store_redundant_varint(buf, offset, value, size)
