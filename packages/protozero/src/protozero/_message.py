"""`Message`: the append-only writer every generated message class derives from."""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import TypeVar

from protozero._errors import ProtozeroError
from protozero._proto_utils import (
    MAX_MESSAGE_LENGTH,
    WIRE_TYPE_FIXED32,
    WIRE_TYPE_FIXED64,
    WIRE_TYPE_LENGTH_DELIMITED,
    WIRE_TYPE_VARINT,
    WritableBuffer,
    encode_tag,
    encode_varint,
)
from protozero._scattered_stream_writer import ScatteredStreamWriter

M = TypeVar("M", bound="Message")

_pack_u32 = struct.Struct("<I").pack_into
_pack_u64 = struct.Struct("<Q").pack_into
_pack_f32 = struct.Struct("<f").pack_into
_pack_f64 = struct.Struct("<d").pack_into

_CACHED_TAG_FIELD_IDS = 4096
_tag_cache: dict[int, bytes] = {}


def field_tag(field_id: int, wire_type: int) -> bytes:
    """The encoded tag of a field, cached for the field ids messages commonly use."""
    key = (field_id << 3) | wire_type
    tag = _tag_cache.get(key)
    if tag is None:
        tag = encode_tag(field_id, wire_type)
        if field_id < _CACHED_TAG_FIELD_IDS:
            _tag_cache[key] = tag
    return tag


class _RefusingDelegate:
    """The delegate of a writer that must never be written to; says why on first use."""

    __slots__ = ("_reason",)

    def __init__(self, reason: str) -> None:
        self._reason = reason

    def get_new_buffer(self) -> tuple[WritableBuffer, int, int]:
        raise ProtozeroError(self._reason)


# Messages point at one of these when they may not be written: any write lands in the
# writer's empty range, asks for a buffer and raises. The hot path pays nothing for it.
_UNBOUND_WRITER = ScatteredStreamWriter(
    _RefusingDelegate("message is not bound to a stream writer: call reset() first")
)
_FINALIZED_WRITER = ScatteredStreamWriter(
    _RefusingDelegate("message was already finalized and cannot be written to")
)


class Message:
    """An append-only protobuf message that serializes each field as it is set.

    Fields go straight into the bytes of the `ScatteredStreamWriter` the message is bound to.
    Nested messages are written in stack order: setting a field on a message (or finalizing
    it) first finalizes its open nested message, whose 4-byte size field is then back-filled.
    Writing to a message after it was finalized, or before it was bound with `reset()`, raises
    `ProtozeroError`; the check is free on the hot path and therefore always on.

    The `put_*` methods take the field's pre-encoded tag (generated classes keep tags as
    constants); the `append_*` methods take a field id.
    """

    __slots__ = (
        "_begin",
        "_size",
        "_writer",
        "is_finalized",
        "nested_message",
        "size_field_buffer",
        "size_field_offset",
    )

    def __init__(self) -> None:
        self._writer = _UNBOUND_WRITER
        self._begin = 0
        self._size = 0
        self.nested_message: Message | None = None
        self.size_field_buffer: WritableBuffer | None = None
        self.size_field_offset = 0
        self.is_finalized = False

    def reset(self, stream_writer: ScatteredStreamWriter) -> None:
        """Makes this a fresh root message (no size field) writing into `stream_writer`."""
        self._writer = stream_writer
        self._begin = stream_writer.written()
        self._size = 0
        self.nested_message = None
        self.size_field_buffer = None
        self.size_field_offset = 0
        self.is_finalized = False

    def set_size_field(self, buffer: WritableBuffer | None, offset: int) -> None:
        """Redirects where `finalize()` writes this message's size; None means no size field."""
        self.size_field_buffer = buffer
        self.size_field_offset = offset

    def finalize(self) -> int:
        """Finalizes the open nested message, back-fills the size field, returns the size."""
        if self.is_finalized:
            return self._size
        if self.nested_message is not None:
            self._end_nested_message()
        w = self._writer
        size = w._written_previously + w.write_ptr - w._begin - self._begin
        buf = self.size_field_buffer
        if buf is not None:
            if size > MAX_MESSAGE_LENGTH:
                raise ProtozeroError(
                    f"nested message of {size} bytes exceeds {MAX_MESSAGE_LENGTH} bytes"
                )
            o = self.size_field_offset
            buf[o] = (size & 0x7F) | 0x80
            buf[o + 1] = ((size >> 7) & 0x7F) | 0x80
            buf[o + 2] = ((size >> 14) & 0x7F) | 0x80
            buf[o + 3] = size >> 21
        self._size = size
        self.is_finalized = True
        self._writer = _FINALIZED_WRITER
        return size

    def _end_nested_message(self) -> None:
        child = self.nested_message
        if child is not None:
            child.finalize()
            self.nested_message = None

    # -- Tag-first writers (the hot path of generated code) ----------------------------------

    def put_varint(self, tag: bytes, value: int) -> None:
        """Writes a varint field; negative values take 10 bytes, like protobuf's int32/int64."""
        if self.nested_message is not None:
            self._end_nested_message()
        w = self._writer
        p = w.write_ptr
        q = p + len(tag)
        if q + 10 <= w.end:
            buf = w.buffer
            buf[p:q] = tag
            value &= 0xFFFF_FFFF_FFFF_FFFF
            while value > 0x7F:
                buf[q] = (value & 0x7F) | 0x80
                value >>= 7
                q += 1
            buf[q] = value
            w.write_ptr = q + 1
        else:
            w.write_bytes(tag + encode_varint(value))

    def put_zigzag(self, tag: bytes, value: int) -> None:
        """Writes a zigzag-encoded varint field (sint32/sint64)."""
        self.put_varint(tag, (value << 1) ^ (value >> 63))

    def put_fixed32(self, tag: bytes, value: int) -> None:
        """Writes a 4-byte little-endian field (fixed32, or sfixed32 as two's complement)."""
        if self.nested_message is not None:
            self._end_nested_message()
        w = self._writer
        p = w.write_ptr
        q = p + len(tag)
        if q + 4 <= w.end:
            buf = w.buffer
            buf[p:q] = tag
            _pack_u32(buf, q, value & 0xFFFF_FFFF)
            w.write_ptr = q + 4
        else:
            w.write_bytes(tag + struct.pack("<I", value & 0xFFFF_FFFF))

    def put_fixed64(self, tag: bytes, value: int) -> None:
        """Writes an 8-byte little-endian field (fixed64, or sfixed64 as two's complement)."""
        if self.nested_message is not None:
            self._end_nested_message()
        w = self._writer
        p = w.write_ptr
        q = p + len(tag)
        if q + 8 <= w.end:
            buf = w.buffer
            buf[p:q] = tag
            _pack_u64(buf, q, value & 0xFFFF_FFFF_FFFF_FFFF)
            w.write_ptr = q + 8
        else:
            w.write_bytes(tag + struct.pack("<Q", value & 0xFFFF_FFFF_FFFF_FFFF))

    def put_float(self, tag: bytes, value: float) -> None:
        """Writes a float field (4 bytes, IEEE 754)."""
        if self.nested_message is not None:
            self._end_nested_message()
        w = self._writer
        p = w.write_ptr
        q = p + len(tag)
        if q + 4 <= w.end:
            buf = w.buffer
            buf[p:q] = tag
            _pack_f32(buf, q, value)
            w.write_ptr = q + 4
        else:
            w.write_bytes(tag + struct.pack("<f", value))

    def put_double(self, tag: bytes, value: float) -> None:
        """Writes a double field (8 bytes, IEEE 754)."""
        if self.nested_message is not None:
            self._end_nested_message()
        w = self._writer
        p = w.write_ptr
        q = p + len(tag)
        if q + 8 <= w.end:
            buf = w.buffer
            buf[p:q] = tag
            _pack_f64(buf, q, value)
            w.write_ptr = q + 8
        else:
            w.write_bytes(tag + struct.pack("<d", value))

    def put_bytes(self, tag: bytes, data: bytes | bytearray | memoryview) -> None:
        """Writes a length-delimited field holding `data` (a bytes-like object of bytes)."""
        if self.nested_message is not None:
            self._end_nested_message()
        w = self._writer
        n = len(data)
        p = w.write_ptr
        q = p + len(tag)
        if n < 0x80 and q + 1 + n <= w.end:
            buf = w.buffer
            buf[p:q] = tag
            buf[q] = n
            q += 1
            buf[q : q + n] = data
            w.write_ptr = q + n
        else:
            w.write_bytes(tag + encode_varint(n))
            w.write_bytes(data)

    def put_string(self, tag: bytes, value: str) -> None:
        """Writes a string field (UTF-8)."""
        self.put_bytes(tag, value.encode())

    def put_packed_varints(self, tag: bytes, values: Iterable[int]) -> None:
        """Writes a packed repeated varint field (int32/int64/uint32/uint64/bool/enum)."""
        payload = bytearray()
        for item in values:
            value = item & 0xFFFF_FFFF_FFFF_FFFF
            while value > 0x7F:
                payload.append((value & 0x7F) | 0x80)
                value >>= 7
            payload.append(value)
        self.put_bytes(tag, payload)

    def put_packed_zigzag(self, tag: bytes, values: Iterable[int]) -> None:
        """Writes a packed repeated zigzag varint field (sint32/sint64)."""
        self.put_packed_varints(tag, ((v << 1) ^ (v >> 63) for v in values))

    def put_packed_fixed32(self, tag: bytes, values: Iterable[int]) -> None:
        """Writes a packed repeated fixed32/sfixed32 field."""
        masked = [v & 0xFFFF_FFFF for v in values]
        self.put_bytes(tag, struct.pack(f"<{len(masked)}I", *masked))

    def put_packed_fixed64(self, tag: bytes, values: Iterable[int]) -> None:
        """Writes a packed repeated fixed64/sfixed64 field."""
        masked = [v & 0xFFFF_FFFF_FFFF_FFFF for v in values]
        self.put_bytes(tag, struct.pack(f"<{len(masked)}Q", *masked))

    def put_packed_float(self, tag: bytes, values: Iterable[float]) -> None:
        """Writes a packed repeated float field."""
        items = list(values)
        self.put_bytes(tag, struct.pack(f"<{len(items)}f", *items))

    def put_packed_double(self, tag: bytes, values: Iterable[float]) -> None:
        """Writes a packed repeated double field."""
        items = list(values)
        self.put_bytes(tag, struct.pack(f"<{len(items)}d", *items))

    def begin_nested(self, tag: bytes, cls: type[M]) -> M:
        """Starts a nested message field; returns the child, bound to the same stream writer."""
        if self.nested_message is not None:
            self._end_nested_message()
        w = self._writer
        p = w.write_ptr
        q = p + len(tag)
        if q + 4 <= w.end:
            w.buffer[p:q] = tag
            w.write_ptr = q + 4
        else:
            w.write_bytes(tag)
            q = w.reserve_bytes(4)
        child = cls()
        child._writer = w
        child._begin = w._written_previously + w.write_ptr - w._begin
        child.size_field_buffer = w.buffer
        child.size_field_offset = q
        self.nested_message = child
        return child

    # -- Field-id writers ----------------------------------------------------------------------

    def append_varint(self, field_id: int, value: int) -> None:
        """Appends a varint field (uint32/uint64/enum; negative values take 10 bytes)."""
        self.put_varint(field_tag(field_id, WIRE_TYPE_VARINT), value)

    def append_int(self, field_id: int, value: int) -> None:
        """Appends an int32/int64 field; negative values take 10 bytes, like protobuf."""
        self.put_varint(field_tag(field_id, WIRE_TYPE_VARINT), value)

    def append_zigzag(self, field_id: int, value: int) -> None:
        """Appends a sint32/sint64 field (zigzag varint)."""
        self.put_zigzag(field_tag(field_id, WIRE_TYPE_VARINT), value)

    def append_bool(self, field_id: int, value: bool) -> None:
        """Appends a bool field."""
        self.put_varint(field_tag(field_id, WIRE_TYPE_VARINT), 1 if value else 0)

    def append_fixed32(self, field_id: int, value: int) -> None:
        """Appends a fixed32 field."""
        self.put_fixed32(field_tag(field_id, WIRE_TYPE_FIXED32), value)

    def append_sfixed32(self, field_id: int, value: int) -> None:
        """Appends an sfixed32 field."""
        self.put_fixed32(field_tag(field_id, WIRE_TYPE_FIXED32), value)

    def append_fixed64(self, field_id: int, value: int) -> None:
        """Appends a fixed64 field."""
        self.put_fixed64(field_tag(field_id, WIRE_TYPE_FIXED64), value)

    def append_sfixed64(self, field_id: int, value: int) -> None:
        """Appends an sfixed64 field."""
        self.put_fixed64(field_tag(field_id, WIRE_TYPE_FIXED64), value)

    def append_float(self, field_id: int, value: float) -> None:
        """Appends a float field."""
        self.put_float(field_tag(field_id, WIRE_TYPE_FIXED32), value)

    def append_double(self, field_id: int, value: float) -> None:
        """Appends a double field."""
        self.put_double(field_tag(field_id, WIRE_TYPE_FIXED64), value)

    def append_bytes(self, field_id: int, data: bytes | bytearray | memoryview) -> None:
        """Appends a bytes field."""
        self.put_bytes(field_tag(field_id, WIRE_TYPE_LENGTH_DELIMITED), data)

    def append_string(self, field_id: int, value: str) -> None:
        """Appends a string field (UTF-8)."""
        self.put_bytes(field_tag(field_id, WIRE_TYPE_LENGTH_DELIMITED), value.encode())

    def append_packed_varints(self, field_id: int, values: Iterable[int]) -> None:
        """Appends a packed repeated varint field."""
        self.put_packed_varints(field_tag(field_id, WIRE_TYPE_LENGTH_DELIMITED), values)

    def append_packed_zigzag(self, field_id: int, values: Iterable[int]) -> None:
        """Appends a packed repeated sint32/sint64 field."""
        self.put_packed_zigzag(field_tag(field_id, WIRE_TYPE_LENGTH_DELIMITED), values)

    def append_packed_fixed32(self, field_id: int, values: Iterable[int]) -> None:
        """Appends a packed repeated fixed32/sfixed32 field."""
        self.put_packed_fixed32(field_tag(field_id, WIRE_TYPE_LENGTH_DELIMITED), values)

    def append_packed_fixed64(self, field_id: int, values: Iterable[int]) -> None:
        """Appends a packed repeated fixed64/sfixed64 field."""
        self.put_packed_fixed64(field_tag(field_id, WIRE_TYPE_LENGTH_DELIMITED), values)

    def append_packed_float(self, field_id: int, values: Iterable[float]) -> None:
        """Appends a packed repeated float field."""
        self.put_packed_float(field_tag(field_id, WIRE_TYPE_LENGTH_DELIMITED), values)

    def append_packed_double(self, field_id: int, values: Iterable[float]) -> None:
        """Appends a packed repeated double field."""
        self.put_packed_double(field_tag(field_id, WIRE_TYPE_LENGTH_DELIMITED), values)

    def append_raw(self, data: bytes | bytearray | memoryview) -> None:
        """Appends bytes that already are encoded fields of this message."""
        if self.nested_message is not None:
            self._end_nested_message()
        self._writer.write_bytes(data)

    def begin_nested_message(self, field_id: int, cls: type[M]) -> M:
        """Starts nested message field `field_id` of type `cls` and returns it."""
        return self.begin_nested(field_tag(field_id, WIRE_TYPE_LENGTH_DELIMITED), cls)
