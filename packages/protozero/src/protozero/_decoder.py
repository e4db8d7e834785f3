"""A decoder that walks the fields of an encoded message without copying its bytes."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:  # Cython ships no types: check `@cython.locals` against the stand-in's
    from protozero import _cython_shim as cython
else:
    try:
        import cython
    except ImportError:  # installed without Cython: runs as pure Python
        from protozero import _cython_shim as cython

from protozero._proto_utils import (
    MAX_FIELD_ID,
    MAX_MESSAGE_LENGTH,
    WIRE_TYPE_FIXED32,
    WIRE_TYPE_FIXED64,
    WIRE_TYPE_LENGTH_DELIMITED,
    WIRE_TYPE_VARINT,
)

T = TypeVar("T", int, float)

_MAX_VARINT_SIZE = 10

_unpack_f32 = struct.Struct("<f").unpack
_unpack_f64 = struct.Struct("<d").unpack


def _to_view(buf: bytes | bytearray | memoryview) -> memoryview:
    view = memoryview(buf)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    return view


def read_varint(buf: bytes | bytearray | memoryview, pos: int, end: int) -> tuple[int, int]:
    """Reads a varint at `buf[pos]`; returns (value, next position), next = -1 if malformed.

    Values wider than 64 bits are truncated to 64 bits; a varint longer than 10 bytes or one
    that runs past `end` (or the buffer) is malformed. Compiled modules of any package cimport
    it; it is the one varint decoder.
    """
    value = 0
    shift = 0
    limit = min(end, pos + _MAX_VARINT_SIZE, len(buf))
    if pos < 0:
        return 0, -1
    while pos < limit:
        b = buf[pos]
        pos += 1
        low = b & 0x7F
        value |= low << shift
        if b < 0x80:
            return value & 0xFFFF_FFFF_FFFF_FFFF, pos
        shift += 7
    return 0, -1


class PackedRepeated(Generic[T]):
    """Iterates the items of a packed repeated field; stops at the first malformed item.

    After iteration `error` says what was wrong (None if the field was well formed).
    """

    __slots__ = ("_kind", "_view", "error")

    def __init__(self, view: memoryview, kind: str) -> None:
        self._view = view
        self._kind = kind
        self.error: str | None = None

    def __iter__(self) -> Iterator[T]:
        self.error = None
        view = self._view
        if self._kind == "varint":
            yield from self._varints()
            return
        fmt = {"fixed32": "<I", "fixed64": "<Q", "float": "<f", "double": "<d"}[self._kind]
        width = struct.calcsize(fmt)
        whole = len(view) - len(view) % width
        for (item,) in struct.iter_unpack(fmt, view[:whole]):
            yield item
        if whole != len(view):
            self.error = f"packed {self._kind} field of {len(view)} bytes has a partial item"

    def _varints(self) -> Iterator[T]:
        view = self._view
        pos = 0
        end = len(view)
        while pos < end:
            value, pos = read_varint(view, pos, end)
            if pos < 0:
                self.error = "packed varint field ends inside a varint"
                return
            yield value


class Field:
    """One decoded field: its `id`, wire `type` and typed views of its value.

    `size` is the payload size of a length-delimited field (0 for the other wire types).
    """

    __slots__ = ("_buf", "_offset", "_value", "id", "size", "type")

    def __init__(self, tag: int, value: int, buf: memoryview, offset: int, size: int) -> None:
        self.id = tag >> 3
        self.type = tag & 7
        self._value = value
        self._buf = buf
        self._offset = offset
        self.size = size

    def __repr__(self) -> str:
        if self.type == WIRE_TYPE_LENGTH_DELIMITED:
            return f"Field(id={self.id}, type={self.type}, size={self.size})"
        return f"Field(id={self.id}, type={self.type}, value={self._value})"

    def as_uint64(self) -> int:
        """The value as an unsigned 64-bit integer (varint, fixed32 or fixed64)."""
        return self._value

    def as_uint32(self) -> int:
        """The low 32 bits of the value, unsigned."""
        return self._value & 0xFFFF_FFFF

    def as_int64(self) -> int:
        """The value as a signed 64-bit integer (int64, sfixed64, enum)."""
        v = self._value
        return v - (1 << 64) if v >= 1 << 63 else v

    def as_int32(self) -> int:
        """The low 32 bits of the value, signed (int32, sfixed32, enum)."""
        v = self._value & 0xFFFF_FFFF
        return v - (1 << 32) if v >= 1 << 31 else v

    def as_sint64(self) -> int:
        """The value of a zigzag-encoded sint64 field."""
        v = self._value
        return (v >> 1) ^ -(v & 1)

    def as_sint32(self) -> int:
        """The value of a zigzag-encoded sint32 field."""
        v = self._value & 0xFFFF_FFFF
        return (v >> 1) ^ -(v & 1)

    def as_bool(self) -> bool:
        """The value as a bool (nonzero is True)."""
        return self._value != 0

    def as_fixed32(self) -> int:
        """The value of a fixed32 field."""
        return self._value & 0xFFFF_FFFF

    def as_fixed64(self) -> int:
        """The value of a fixed64 field."""
        return self._value

    def as_float(self) -> float:
        """The value of a float field."""
        return float(_unpack_f32((self._value & 0xFFFF_FFFF).to_bytes(4, "little"))[0])

    def as_double(self) -> float:
        """The value of a double field."""
        return float(_unpack_f64(self._value.to_bytes(8, "little"))[0])

    def as_bytes(self) -> memoryview:
        """The payload of a length-delimited field, a view into the decoded buffer (no copy)."""
        return self._buf[self._offset : self._offset + self.size]

    def as_string(self) -> str:
        """The payload decoded as UTF-8; invalid sequences become U+FFFD."""
        return str(self.as_bytes(), "utf-8", "replace")

    def as_message(self) -> ProtoDecoder:
        """A decoder over the payload of a nested message field (no copy)."""
        return ProtoDecoder(self.as_bytes())

    def packed_varints(self) -> PackedRepeated[int]:
        """The items of a packed varint field, as unsigned 64-bit integers."""
        return PackedRepeated(self.as_bytes(), "varint")

    def packed_fixed32(self) -> PackedRepeated[int]:
        """The items of a packed fixed32 field."""
        return PackedRepeated(self.as_bytes(), "fixed32")

    def packed_fixed64(self) -> PackedRepeated[int]:
        """The items of a packed fixed64 field."""
        return PackedRepeated(self.as_bytes(), "fixed64")

    def packed_floats(self) -> PackedRepeated[float]:
        """The items of a packed float field."""
        return PackedRepeated(self.as_bytes(), "float")

    def packed_doubles(self) -> PackedRepeated[float]:
        """The items of a packed double field."""
        return PackedRepeated(self.as_bytes(), "double")


class ProtoDecoder:
    """Iterates the fields of an encoded message held in `buf` (not copied).

    Iteration stops at the first malformed field; `error` then says what was wrong and
    `error_offset` where (both None after a clean pass). Fields whose id is above the
    protobuf maximum, or whose payload exceeds 256 MiB, are skipped like upstream does.
    """

    __slots__ = ("_buf", "error", "error_offset")

    def __init__(self, buf: bytes | bytearray | memoryview) -> None:
        self._buf = _to_view(buf)
        self.error: str | None = None
        self.error_offset: int | None = None

    def __len__(self) -> int:
        return len(self._buf)

    def data(self) -> memoryview:
        """The bytes being decoded."""
        return self._buf

    def _fail(self, offset: int, what: str) -> None:
        self.error = f"{what} at offset {offset}"
        self.error_offset = offset

    @cython.locals(
        view="const unsigned char[::1]",
        end=cython.Py_ssize_t,
        pos=cython.Py_ssize_t,
        start=cython.Py_ssize_t,
        offset=cython.Py_ssize_t,
    )
    def __iter__(self) -> Iterator[Field]:
        self.error = None
        self.error_offset = None
        buf = self._buf
        view = buf
        end = len(buf)
        pos = 0
        while pos < end:
            start = pos
            tag = view[pos]
            if tag < 0x80:
                pos += 1
            else:
                tag, pos = read_varint(view, pos, end)
                if pos < 0:
                    self._fail(start, "truncated or overlong field tag")
                    return
            field_id = tag >> 3
            wire_type = tag & 7
            if field_id == 0:
                self._fail(start, "field id 0")
                return
            value = 0
            size = 0
            offset = pos
            if wire_type == WIRE_TYPE_VARINT:
                value, pos = read_varint(view, pos, end)
                if pos < 0:
                    self._fail(start, f"truncated varint of field {field_id}")
                    return
            elif wire_type == WIRE_TYPE_LENGTH_DELIMITED:
                size, offset = read_varint(view, pos, end)
                if offset < 0 or size > end - offset:
                    self._fail(start, f"length-delimited field {field_id} overruns the buffer")
                    return
                pos = offset + size
            elif wire_type == WIRE_TYPE_FIXED64:
                pos += 8
                if pos > end:
                    self._fail(start, f"truncated fixed64 field {field_id}")
                    return
                value = int.from_bytes(buf[offset:pos], "little")
            elif wire_type == WIRE_TYPE_FIXED32:
                pos += 4
                if pos > end:
                    self._fail(start, f"truncated fixed32 field {field_id}")
                    return
                value = int.from_bytes(buf[offset:pos], "little")
            else:
                self._fail(start, f"unsupported wire type {wire_type} of field {field_id}")
                return
            if field_id > MAX_FIELD_ID or size > MAX_MESSAGE_LENGTH:
                continue
            yield Field(tag, value, buf, offset, size)

    def find(self, field_id: int) -> Field | None:
        """The first field with id `field_id`, or None."""
        for field in self:
            if field.id == field_id:
                return field
        return None

    def find_all(self, field_id: int) -> list[Field]:
        """Every field with id `field_id`, in order (repeated fields)."""
        return [field for field in self if field.id == field_id]

    def fields_by_id(self) -> dict[int, list[Field]]:
        """Every field, grouped by id, each group in order."""
        out: dict[int, list[Field]] = {}
        for field in self:
            out.setdefault(field.id, []).append(field)
        return out
