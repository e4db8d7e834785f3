"""The benchmark's field values and fill loops (Simple, Nested, Wide), and `FieldStoreFloor`.

`FieldStoreFloor` is the floor of any writer that stores each field with a method call.
"""

from __future__ import annotations

from bench_messages_pbzero import EveryField
from protozero import ScatteredStreamWriter

INT32 = 0x12345678
UINT32 = 0x90ABCDEF
INT64 = 0x11111111
UINT64 = 0xFFFFFFFF
STRING = "f" * 32
SINT32 = -0x1234
SINT64 = -0x11111111
FIXED32 = 0x12345678
FIXED64 = 0x1111111111111111
DOUBLE = 3.25
BOOL = True


def fill_simple(m: EveryField) -> None:
    """Sets the Simple fields."""
    m.set_field_int32(INT32)
    m.set_field_uint32(UINT32)
    m.set_field_int64(INT64)
    m.set_field_uint64(UINT64)
    m.set_field_string(STRING)


def fill_nested(m: EveryField, depth: int) -> None:
    """Sets the Simple fields and nests a child filled the same way, down to depth 3."""
    fill_simple(m)
    if depth < 3:
        fill_nested(m.add_field_nested(), depth + 1)


def fill_wide(m: EveryField) -> None:
    """Sets ten scalar fields of eight types and adds three children filled like Simple."""
    m.set_field_int32(INT32)
    m.set_field_uint32(UINT32)
    m.set_field_int64(INT64)
    m.set_field_uint64(UINT64)
    m.set_field_sint32(SINT32)
    m.set_field_sint64(SINT64)
    m.set_field_fixed32(FIXED32)
    m.set_field_fixed64(FIXED64)
    m.set_field_double(DOUBLE)
    m.set_field_bool(BOOL)
    fill_simple(m.add_field_nested())
    fill_simple(m.add_field_nested())
    fill_simple(m.add_field_nested())


def write_simple(writer: ScatteredStreamWriter, buf: memoryview, msg: EveryField) -> None:
    """Writes one Simple message at the start of `buf`."""
    writer.reset(buf, 0, len(buf))
    msg.reset(writer)
    fill_simple(msg)
    msg.finalize()


def write_nested(writer: ScatteredStreamWriter, buf: memoryview, msg: EveryField) -> None:
    """Writes one Nested message at the start of `buf`."""
    writer.reset(buf, 0, len(buf))
    msg.reset(writer)
    fill_nested(msg, 0)
    msg.finalize()


def write_wide(writer: ScatteredStreamWriter, buf: memoryview, msg: EveryField) -> None:
    """Writes one Wide message at the start of `buf`."""
    writer.reset(buf, 0, len(buf))
    msg.reset(writer)
    fill_wide(msg)
    msg.finalize()


class FieldStoreFloor:
    """The least a setter can cost in this design: one method call and one slice store."""

    __slots__ = ("buffer",)

    def __init__(self, buffer: memoryview) -> None:
        self.buffer = buffer

    def store(self, offset: int, data: bytes) -> None:
        """Stores one field's encoded bytes at `offset`."""
        self.buffer[offset : offset + len(data)] = data
