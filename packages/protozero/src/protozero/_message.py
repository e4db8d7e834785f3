"""`Message`: the append-only writer every generated message class derives from."""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import TypeVar

try:
    import cython
except ImportError:  # installed without Cython: runs as pure Python
    from protozero import _cython_shim as cython

from protozero._errors import ProtozeroError
from protozero._proto_utils import (
    MAX_MESSAGE_LENGTH,
    VARINT_PAIRS,
    WIRE_TYPE_FIXED32,
    WIRE_TYPE_FIXED64,
    WIRE_TYPE_LENGTH_DELIMITED,
    WIRE_TYPE_VARINT,
    WritableBuffer,
    encode_tag,
    encode_varint,
)
from protozero._scattered_stream_writer import ScatteredStreamWriter

if cython.compiled:
    from cython.cimports.cpython.bytes import PyBytes_AS_STRING
    from cython.cimports.cpython.long import (
        PyLong_AsLongLongAndOverflow,
        PyLong_AsUnsignedLongLongMask,
    )
    from cython.cimports.cpython.ref import Py_REFCNT
    from cython.cimports.cpython.unicode import PyUnicode_AsUTF8AndSize
    from cython.cimports.libc.math import isinf
    from cython.cimports.libc.string import memcpy
    from cython.cimports.protozero._proto_utils import store_redundant_varint
    from cython.cimports.protozero._varint import put_varint as store_varint_at

M = TypeVar("M", bound="Message")

COMPILED: bool = cython.compiled
"""Whether `Message` runs compiled: generated setters then make one call per field."""

MAX_ONE_BYTE_MESSAGE_LENGTH = 127
"""A finalized nested message up to this size gets a 1-byte size field, like upstream's."""

_pack_u32 = struct.Struct("<I").pack_into
_pack_u64 = struct.Struct("<Q").pack_into
_pack_f32 = struct.Struct("<f").pack_into
_pack_f64 = struct.Struct("<d").pack_into

_CACHED_TAG_FIELD_IDS = 4096
_tag_cache: dict[int, int] = {}


def tag_word(field_id: int, wire_type: int) -> int:
    """A field's encoded tag bytes read as a little-endian integer: the `tag` of `put_*`."""
    key = (field_id << 3) | wire_type
    word = _tag_cache.get(key)
    if word is None:
        word = int.from_bytes(encode_tag(field_id, wire_type), "little")
        if field_id < _CACHED_TAG_FIELD_IDS:
            _tag_cache[key] = word
    return word


def tag_bytes(word: int) -> bytes:
    """The encoded tag bytes of a tag word (the inverse of `tag_word`'s packing)."""
    return word.to_bytes((word.bit_length() + 7) // 8, "little")


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
SUSPENDED_WRITER = ScatteredStreamWriter(
    _RefusingDelegate("internal error: wrote to a message while its nested message is open")
)
"""A message's `stream_writer` while a nested message is open (generated code sets it).

Its range is empty, so every write takes the `put_*` path, which finalizes the nested message
first: fast paths never need to check `nested_message`.
"""


def _store_tag(w: ScatteredStreamWriter, p: int, tag: int) -> int:
    """Stores a tag word at `p` in `w`'s range; returns the position after it (compiled only)."""
    while tag > 0xFF:
        w._view[p] = tag & 0xFF
        tag >>= 8
        p += 1
    w._view[p] = tag
    return p + 1


def _store_le(w: ScatteredStreamWriter, p: int, value: int, size: int) -> int:
    """Stores the `size` low bytes of `value` little-endian at `p` in `w`'s range; returns the
    position after them (compiled only)."""
    for i in range(size):
        w._view[p + i] = (value >> (8 * i)) & 0xFF
    return p + size


class Message:
    """An append-only protobuf message that serializes each field as it is set.

    Fields go straight into the bytes of the `ScatteredStreamWriter` the message is bound to.
    Nested messages are written in stack order: setting a field on a message (or finalizing
    it) first finalizes its open nested message, whose 4-byte size field is then back-filled.
    Writing to a message after it was finalized, or before it was bound with `reset()`, raises
    `ProtozeroError`; the check is free on the hot path and therefore always on.

    The `put_*` methods take the field's pre-encoded tag (generated classes keep tags as
    constants); the `append_*` methods take a field id. Generated setters write common fields
    straight into `stream_writer` (its `buffer`, `write_ptr` and `end`) when the field fits the
    current range, and call `put_*` otherwise. While a nested message is open (and once the
    message is finalized) `stream_writer` has an empty range, so every write takes the `put_*`
    path, which finalizes the nested message first.
    """

    __slots__ = (
        "_begin",
        "_compacted",
        "_size",
        "_spare",
        "_writer",
        "nested_message",
        "size_field_buffer",
        "size_field_offset",
        "stream_writer",
    )

    def __init__(
        self, stream_writer: ScatteredStreamWriter = _UNBOUND_WRITER, size_field_offset: int = -1
    ) -> None:
        """An unbound message (bind it with `reset()`), or with both arguments a nested one.

        A nested message's 4-byte size field is at `size_field_offset` in the writer's current
        buffer and its payload starts at the writer's current position.
        """
        self.stream_writer: ScatteredStreamWriter = stream_writer
        self._writer: ScatteredStreamWriter = stream_writer
        self.nested_message: Message | None = None
        self._size = 0
        self._compacted = False
        self._spare: Message | None = None
        """The last child begun (compiled: bound again for the next child when unreferenced)."""
        if size_field_offset >= 0:
            self.size_field_buffer: WritableBuffer | None = stream_writer.buffer
            self.size_field_offset = size_field_offset
            self._begin = stream_writer.write_ptr - stream_writer._origin
        else:
            self.size_field_buffer = None
            self.size_field_offset = 0
            self._begin = 0

    def reset(self, stream_writer: ScatteredStreamWriter) -> None:
        """Makes this a fresh root message (no size field) writing into `stream_writer`."""
        self.stream_writer = stream_writer
        self._writer = stream_writer
        self._begin = stream_writer.write_ptr - stream_writer._origin
        self._size = 0
        self._compacted = False
        self.nested_message = None
        self.size_field_buffer = None
        self.size_field_offset = 0

    def _bind_nested(self, stream_writer: ScatteredStreamWriter, size_field_offset: int) -> None:
        """Binds a new message as a nested one (what `__init__` does with both arguments)."""
        self.stream_writer = stream_writer
        self._writer = stream_writer
        self.nested_message = None
        self._size = 0
        self._compacted = False
        self.size_field_buffer = stream_writer.buffer
        self.size_field_offset = size_field_offset
        self._begin = stream_writer.write_ptr - stream_writer._origin

    @property
    def is_finalized(self) -> bool:
        """Whether `finalize()` was called (since the last `reset()`)."""
        return self._writer is _FINALIZED_WRITER

    def set_size_field(self, buffer: WritableBuffer | None, offset: int) -> None:
        """Redirects where `finalize()` writes this message's size; None means no size field."""
        self.size_field_buffer = buffer
        self.size_field_offset = offset

    def finalize(self) -> int:
        """Finalizes the open nested message, back-fills the size field, returns the size.

        Like upstream, a nested message of up to 127 bytes whose size field is still right
        before its payload in the current range is moved back over 3 of the 4 reserved bytes
        and gets a 1-byte size; one whose size field lies elsewhere (an earlier range, a patch)
        keeps the 4-byte form.
        """
        w = self._writer
        if w is _FINALIZED_WRITER:
            return self._size
        child = self.nested_message
        if child is not None:
            child.finalize()
            self.nested_message = None
        size = w.write_ptr - w._origin - self._begin
        buf = self.size_field_buffer
        if buf is not None:
            o = self.size_field_offset
            if (
                size <= MAX_ONE_BYTE_MESSAGE_LENGTH
                and buf is w.buffer
                and o == w.write_ptr - size - 4
                and o >= w._begin
            ):
                w.rewind(size, 3)
                w._view[o] = size
                self._compacted = True
            elif size > MAX_MESSAGE_LENGTH:
                raise ProtozeroError(
                    f"nested message of {size} bytes exceeds {MAX_MESSAGE_LENGTH} bytes"
                )
            elif cython.compiled and buf is w.buffer:
                store_redundant_varint(w._view, o, size, 4)
            elif size < 0x4000:
                # A 4-byte redundant varint: continuation bits on all but the last byte.
                buf[o : o + 4] = VARINT_PAIRS[size] + b"\x80\x00"
            else:
                buf[o : o + 4] = (
                    (size & 0x7F)
                    | ((size & 0x3F80) << 1)
                    | ((size & 0x1FC000) << 2)
                    | ((size & 0xFE00000) << 3)
                    | 0x808080
                ).to_bytes(4, "little")
        self._size = size
        self._writer = _FINALIZED_WRITER
        self.stream_writer = _FINALIZED_WRITER
        return size

    def _end_nested_message(self) -> None:
        child = self.nested_message
        if child is not None:
            child.finalize()
            self.nested_message = None
            self.stream_writer = self._writer

    # -- Tag-first writers (the hot path of generated code) ----------------------------------
    #
    # `tag` is the field's encoded tag bytes read as a little-endian integer (see `tag_word`),
    # so a one-byte tag is stored with a single item assignment and nothing is encoded per call.

    def put_varint(self, tag: int, value: int) -> None:
        """Writes a varint field; negative values take 10 bytes, like protobuf's int32/int64."""
        if cython.compiled:
            self._put_varint64(tag, PyLong_AsUnsignedLongLongMask(value))
            return
        if self.nested_message is not None:
            self._end_nested_message()
        w = self.stream_writer
        p = w.write_ptr
        if p + 15 <= w.end:
            buf = w.buffer
            while tag > 0xFF:
                buf[p] = tag & 0xFF
                tag >>= 8
                p += 1
            buf[p] = tag
            p += 1
            if value < 0 or value > 0x3FFF_FFFF_FFFF_FFFF:
                value &= 0xFFFF_FFFF_FFFF_FFFF
            while value > 0x7F:
                buf[p] = (value & 0x7F) | 0x80
                value >>= 7
                p += 1
            buf[p] = value
            w.write_ptr = p + 1
        else:
            w.write_bytes(tag_bytes(tag) + encode_varint(value))

    def _put_varint64(self, tag: int, value: int) -> None:
        """Writes a varint field of 0 <= `value` < 2**64 (compiled only: `put_varint`'s and
        `put_zigzag`'s C path)."""
        if self.nested_message is not None:
            self._end_nested_message()
        w = self.stream_writer
        p = w.write_ptr
        if p + 15 <= w.end:
            base = cython.address(w._view[0])
            w.write_ptr = store_varint_at(base + _store_tag(w, p, tag), value) - base
        else:
            w.write_bytes(tag_bytes(tag) + encode_varint(value))

    def put_zigzag(self, tag: int, value: int) -> None:
        """Writes a zigzag-encoded varint field (sint32/sint64)."""
        if cython.compiled:
            overflow = 0
            v = PyLong_AsLongLongAndOverflow(value, cython.address(overflow))
            if not overflow:
                self._put_varint64(tag, (cython.cast(cython.ulonglong, v) << 1) ^ (v >> 63))
                return
        self.put_varint(tag, ((value << 1) ^ (value >> 63)) & 0xFFFF_FFFF_FFFF_FFFF)

    def put_fixed32(self, tag: int, value: int) -> None:
        """Writes a 4-byte little-endian field (fixed32, or sfixed32 as two's complement)."""
        if self.nested_message is not None:
            self._end_nested_message()
        w = self.stream_writer
        p = w.write_ptr
        if cython.compiled and p + 9 <= w.end:
            v = PyLong_AsUnsignedLongLongMask(value)
            w.write_ptr = _store_le(w, _store_tag(w, p, tag), v, 4)
            return
        if p + 9 <= w.end:
            buf = w.buffer
            while tag > 0xFF:
                buf[p] = tag & 0xFF
                tag >>= 8
                p += 1
            buf[p] = tag
            _pack_u32(buf, p + 1, value & 0xFFFF_FFFF)
            w.write_ptr = p + 5
        else:
            w.write_bytes(tag_bytes(tag) + struct.pack("<I", value & 0xFFFF_FFFF))

    def put_fixed64(self, tag: int, value: int) -> None:
        """Writes an 8-byte little-endian field (fixed64, or sfixed64 as two's complement)."""
        if self.nested_message is not None:
            self._end_nested_message()
        w = self.stream_writer
        p = w.write_ptr
        if cython.compiled and p + 13 <= w.end:
            v = PyLong_AsUnsignedLongLongMask(value)
            w.write_ptr = _store_le(w, _store_tag(w, p, tag), v, 8)
            return
        if p + 13 <= w.end:
            buf = w.buffer
            while tag > 0xFF:
                buf[p] = tag & 0xFF
                tag >>= 8
                p += 1
            buf[p] = tag
            _pack_u64(buf, p + 1, value & 0xFFFF_FFFF_FFFF_FFFF)
            w.write_ptr = p + 9
        else:
            w.write_bytes(tag_bytes(tag) + struct.pack("<Q", value & 0xFFFF_FFFF_FFFF_FFFF))

    def put_float(self, tag: int, value: float) -> None:
        """Writes a float field (4 bytes, IEEE 754)."""
        if self.nested_message is not None:
            self._end_nested_message()
        w = self.stream_writer
        p = w.write_ptr
        if cython.compiled and p + 9 <= w.end:
            d = value
            f = d  # rounded like struct's "<f"; a finite value out of its range raises there
            if not isinf(f) or isinf(d):
                bits = cython.cast(cython.p_uint, cython.address(f))[0]  # its IEEE 754 bits
                w.write_ptr = _store_le(w, _store_tag(w, p, tag), bits, 4)
                return
        if p + 9 <= w.end:
            buf = w.buffer
            while tag > 0xFF:
                buf[p] = tag & 0xFF
                tag >>= 8
                p += 1
            buf[p] = tag
            _pack_f32(buf, p + 1, value)
            w.write_ptr = p + 5
        else:
            w.write_bytes(tag_bytes(tag) + struct.pack("<f", value))

    def put_double(self, tag: int, value: float) -> None:
        """Writes a double field (8 bytes, IEEE 754)."""
        if self.nested_message is not None:
            self._end_nested_message()
        w = self.stream_writer
        p = w.write_ptr
        if cython.compiled and p + 13 <= w.end:
            d = value
            bits = cython.cast(cython.p_ulonglong, cython.address(d))[0]  # its IEEE 754 bits
            w.write_ptr = _store_le(w, _store_tag(w, p, tag), bits, 8)
            return
        if p + 13 <= w.end:
            buf = w.buffer
            while tag > 0xFF:
                buf[p] = tag & 0xFF
                tag >>= 8
                p += 1
            buf[p] = tag
            _pack_f64(buf, p + 1, value)
            w.write_ptr = p + 9
        else:
            w.write_bytes(tag_bytes(tag) + struct.pack("<d", value))

    def put_bytes(self, tag: int, data: bytes | bytearray | memoryview) -> None:
        """Writes a length-delimited field holding `data` (a bytes-like object of bytes)."""
        if self.nested_message is not None:
            self._end_nested_message()
        w = self.stream_writer
        n = len(data)
        p = w.write_ptr
        if cython.compiled and type(data) is bytes and n < 0x4000 and p + 7 + n <= w.end:
            base = cython.address(w._view[0])
            p = store_varint_at(base + _store_tag(w, p, tag), n) - base
            if n:
                memcpy(cython.address(w._view[p]), PyBytes_AS_STRING(data), n)
            w.write_ptr = p + n
            return
        if n < 0x80 and p + 6 + n <= w.end:
            buf = w.buffer
            while tag > 0xFF:
                buf[p] = tag & 0xFF
                tag >>= 8
                p += 1
            buf[p] = tag
            buf[p + 1] = n
            p += 2
            buf[p : p + n] = data
            w.write_ptr = p + n
        else:
            w.write_bytes(tag_bytes(tag) + encode_varint(n))
            w.write_bytes(data)

    def put_string(self, tag: int, value: str | bytes) -> None:
        """Writes a string field: a str is encoded as UTF-8, bytes are taken as already encoded."""
        if cython.compiled and type(value) is str:
            if self.nested_message is not None:
                self._end_nested_message()
            w = self.stream_writer
            p = w.write_ptr
            n = 0
            data = PyUnicode_AsUTF8AndSize(value, cython.address(n))
            if n < 0x4000 and p + 7 + n <= w.end:
                base = cython.address(w._view[0])
                p = store_varint_at(base + _store_tag(w, p, tag), n) - base
                if n:
                    memcpy(cython.address(w._view[p]), data, n)
                w.write_ptr = p + n
                return
        self.put_bytes(tag, value.encode() if isinstance(value, str) else value)

    def put_packed_varints(self, tag: int, values: Iterable[int]) -> None:
        """Writes a packed repeated varint field (int32/int64/uint32/uint64/bool/enum)."""
        payload = bytearray()
        for item in values:
            value = item & 0xFFFF_FFFF_FFFF_FFFF
            while value > 0x7F:
                payload.append((value & 0x7F) | 0x80)
                value >>= 7
            payload.append(value)
        self.put_bytes(tag, payload)

    def put_packed_zigzag(self, tag: int, values: Iterable[int]) -> None:
        """Writes a packed repeated zigzag varint field (sint32/sint64)."""
        self.put_packed_varints(tag, ((v << 1) ^ (v >> 63) for v in values))

    def put_packed_fixed32(self, tag: int, values: Iterable[int]) -> None:
        """Writes a packed repeated fixed32/sfixed32 field."""
        masked = [v & 0xFFFF_FFFF for v in values]
        self.put_bytes(tag, struct.pack(f"<{len(masked)}I", *masked))

    def put_packed_fixed64(self, tag: int, values: Iterable[int]) -> None:
        """Writes a packed repeated fixed64/sfixed64 field."""
        masked = [v & 0xFFFF_FFFF_FFFF_FFFF for v in values]
        self.put_bytes(tag, struct.pack(f"<{len(masked)}Q", *masked))

    def put_packed_float(self, tag: int, values: Iterable[float]) -> None:
        """Writes a packed repeated float field."""
        items = list(values)
        self.put_bytes(tag, struct.pack(f"<{len(items)}f", *items))

    def put_packed_double(self, tag: int, values: Iterable[float]) -> None:
        """Writes a packed repeated double field."""
        items = list(values)
        self.put_bytes(tag, struct.pack(f"<{len(items)}d", *items))

    def begin_nested(self, tag: int, cls: type[M]) -> M:
        """Starts a nested message field; returns the child, bound to the same stream writer."""
        if self.nested_message is not None:
            self._end_nested_message()
        w = self.stream_writer
        p = w.write_ptr
        if p + 9 <= w.end:
            if cython.compiled:
                p = _store_tag(w, p, tag)
            else:
                while tag > 0xFF:
                    w.buffer[p] = tag & 0xFF
                    tag >>= 8
                    p += 1
                w.buffer[p] = tag
                p += 1
            w.write_ptr = p + 4
        else:
            w.write_bytes(tag_bytes(tag))
            p = w.reserve_bytes(4)
        if cython.compiled:
            # The last child this message started is bound again when it is of `cls` and
            # nothing but this slot holds it (no caller kept it): no allocation per child.
            child = self._spare
            if type(child) is not cls or Py_REFCNT(child) != 2:  # the slot and `child`
                child = cls.__new__(cls)
                self._spare = child
        else:
            child = cls.__new__(cls)
        child._bind_nested(w, p)
        self.nested_message = child
        self.stream_writer = SUSPENDED_WRITER
        return child

    # -- Field-id writers ----------------------------------------------------------------------

    def append_varint(self, field_id: int, value: int) -> None:
        """Appends a varint field (uint32/uint64/enum; negative values take 10 bytes)."""
        self.put_varint(tag_word(field_id, WIRE_TYPE_VARINT), value)

    def append_int(self, field_id: int, value: int) -> None:
        """Appends an int32/int64 field; negative values take 10 bytes, like protobuf."""
        self.put_varint(tag_word(field_id, WIRE_TYPE_VARINT), value)

    def append_zigzag(self, field_id: int, value: int) -> None:
        """Appends a sint32/sint64 field (zigzag varint)."""
        self.put_zigzag(tag_word(field_id, WIRE_TYPE_VARINT), value)

    def append_bool(self, field_id: int, value: bool) -> None:
        """Appends a bool field."""
        self.put_varint(tag_word(field_id, WIRE_TYPE_VARINT), 1 if value else 0)

    def append_fixed32(self, field_id: int, value: int) -> None:
        """Appends a fixed32 field."""
        self.put_fixed32(tag_word(field_id, WIRE_TYPE_FIXED32), value)

    def append_sfixed32(self, field_id: int, value: int) -> None:
        """Appends an sfixed32 field."""
        self.put_fixed32(tag_word(field_id, WIRE_TYPE_FIXED32), value)

    def append_fixed64(self, field_id: int, value: int) -> None:
        """Appends a fixed64 field."""
        self.put_fixed64(tag_word(field_id, WIRE_TYPE_FIXED64), value)

    def append_sfixed64(self, field_id: int, value: int) -> None:
        """Appends an sfixed64 field."""
        self.put_fixed64(tag_word(field_id, WIRE_TYPE_FIXED64), value)

    def append_float(self, field_id: int, value: float) -> None:
        """Appends a float field."""
        self.put_float(tag_word(field_id, WIRE_TYPE_FIXED32), value)

    def append_double(self, field_id: int, value: float) -> None:
        """Appends a double field."""
        self.put_double(tag_word(field_id, WIRE_TYPE_FIXED64), value)

    def append_bytes(self, field_id: int, data: bytes | bytearray | memoryview) -> None:
        """Appends a bytes field."""
        self.put_bytes(tag_word(field_id, WIRE_TYPE_LENGTH_DELIMITED), data)

    def append_string(self, field_id: int, value: str) -> None:
        """Appends a string field (UTF-8)."""
        self.put_bytes(tag_word(field_id, WIRE_TYPE_LENGTH_DELIMITED), value.encode())

    def append_packed_varints(self, field_id: int, values: Iterable[int]) -> None:
        """Appends a packed repeated varint field."""
        self.put_packed_varints(tag_word(field_id, WIRE_TYPE_LENGTH_DELIMITED), values)

    def append_packed_zigzag(self, field_id: int, values: Iterable[int]) -> None:
        """Appends a packed repeated sint32/sint64 field."""
        self.put_packed_zigzag(tag_word(field_id, WIRE_TYPE_LENGTH_DELIMITED), values)

    def append_packed_fixed32(self, field_id: int, values: Iterable[int]) -> None:
        """Appends a packed repeated fixed32/sfixed32 field."""
        self.put_packed_fixed32(tag_word(field_id, WIRE_TYPE_LENGTH_DELIMITED), values)

    def append_packed_fixed64(self, field_id: int, values: Iterable[int]) -> None:
        """Appends a packed repeated fixed64/sfixed64 field."""
        self.put_packed_fixed64(tag_word(field_id, WIRE_TYPE_LENGTH_DELIMITED), values)

    def append_packed_float(self, field_id: int, values: Iterable[float]) -> None:
        """Appends a packed repeated float field."""
        self.put_packed_float(tag_word(field_id, WIRE_TYPE_LENGTH_DELIMITED), values)

    def append_packed_double(self, field_id: int, values: Iterable[float]) -> None:
        """Appends a packed repeated double field."""
        self.put_packed_double(tag_word(field_id, WIRE_TYPE_LENGTH_DELIMITED), values)

    def append_raw(self, data: bytes | bytearray | memoryview) -> None:
        """Appends bytes that already are encoded fields of this message."""
        if self.nested_message is not None:
            self._end_nested_message()
        self.stream_writer.write_bytes(data)

    def begin_nested_message(self, field_id: int, cls: type[M]) -> M:
        """Starts nested message field `field_id` of type `cls` and returns it."""
        return self.begin_nested(tag_word(field_id, WIRE_TYPE_LENGTH_DELIMITED), cls)
