"""The writer core: Message appenders, nested size back-fill, stream writer and heap buffer."""

from __future__ import annotations

import math
import mmap
from typing import Any

import pytest
from protozero import (
    HeapBuffered,
    Message,
    ProtoDecoder,
    ProtozeroError,
    ScatteredStreamWriter,
    WritableBuffer,
    write_redundant_varint,
)


class ListDelegate:
    """Hands out fixed-size bytearrays and remembers them, so tests can see every range."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.buffers: list[bytearray] = []

    def get_new_buffer(self) -> tuple[WritableBuffer, int, int]:
        buf = bytearray(b"\xee" * self.size)
        self.buffers.append(buf)
        return buf, 0, self.size


def test_scalars_parse_with_protobuf(pb: dict[str, Any]) -> None:
    hb = HeapBuffered(Message)
    m = hb.msg
    m.append_int(1, -5)
    m.append_int(2, -(1 << 63))
    m.append_varint(3, 0xFFFF_FFFF)
    m.append_varint(4, (1 << 64) - 1)
    m.append_zigzag(5, -(1 << 31))
    m.append_zigzag(6, (1 << 63) - 1)
    m.append_fixed32(7, 0xDEADBEEF)
    m.append_fixed64(8, 0x0123_4567_89AB_CDEF)
    m.append_sfixed32(9, -2)
    m.append_sfixed64(10, -3)
    m.append_float(11, 1.5)
    m.append_double(12, math.pi)
    m.append_bool(13, True)
    m.append_string(500, "héllo")
    m.append_bytes(505, b"\x00\xff")
    m.append_varint(51, 1)
    m.append_int(536870911, 7)
    parsed = pb["pztest.EveryField"].FromString(hb.serialize())
    assert parsed.field_int32 == -5
    assert parsed.field_int64 == -(1 << 63)
    assert parsed.field_uint32 == 0xFFFF_FFFF
    assert parsed.field_uint64 == (1 << 64) - 1
    assert parsed.field_sint32 == -(1 << 31)
    assert parsed.field_sint64 == (1 << 63) - 1
    assert parsed.field_fixed32 == 0xDEADBEEF
    assert parsed.field_fixed64 == 0x0123_4567_89AB_CDEF
    assert parsed.field_sfixed32 == -2
    assert parsed.field_sfixed64 == -3
    assert parsed.field_float == 1.5
    assert parsed.field_double == math.pi
    assert parsed.field_bool is True
    assert parsed.field_string == "héllo"
    assert parsed.field_bytes == b"\x00\xff"
    assert parsed.small_enum == 1
    assert parsed.max_id == 7


def test_negative_int32_is_ten_bytes_like_protobuf(pb: dict[str, Any]) -> None:
    hb = HeapBuffered(Message)
    hb.msg.append_int(1, -1)
    ours = hb.serialize()
    assert ours == pb["pztest.EveryField"](field_int32=-1).SerializeToString()
    assert len(ours) == 11


def test_varints_wider_than_64_bits_are_truncated_like_a_cast() -> None:
    hb = HeapBuffered(Message)
    hb.msg.append_varint(4, (1 << 70) + 5)
    hb.msg.append_int(2, -(1 << 70) - 1)
    fields = [(f.id, f.as_uint64()) for f in ProtoDecoder(hb.serialize())]
    assert fields == [(4, 5), (2, ((-(1 << 70) - 1) & ((1 << 64) - 1)))]


def test_packed_fields_parse_with_protobuf(pb: dict[str, Any]) -> None:
    hb = HeapBuffered(Message)
    m = hb.msg
    m.append_packed_varints(1000, [0, 1, -1, 300])
    m.append_packed_zigzag(1001, [-1, 1, -(1 << 63)])
    m.append_packed_fixed32(1002, [1, 0xFFFF_FFFF])
    m.append_packed_double(1003, [0.5, -2.25])
    m.append_packed_float(1004, [0.5])
    m.append_packed_fixed64(1005, [-7])
    parsed = pb["pztest.EveryField"].FromString(hb.serialize())
    assert list(parsed.packed_int32) == [0, 1, -1, 300]
    assert list(parsed.packed_sint64) == [-1, 1, -(1 << 63)]
    assert list(parsed.packed_fixed32) == [1, 0xFFFF_FFFF]
    assert list(parsed.packed_double) == [0.5, -2.25]
    assert list(parsed.packed_float) == [0.5]
    assert list(parsed.packed_sfixed64) == [-7]


# Upstream's Message::Finalize: a nested message of up to 127 bytes whose 4-byte size field
# still sits right before its payload in the current range is moved back by 3 bytes and gets
# a 1-byte size; a larger one, or one whose size field is in an earlier range or was
# redirected (a patch), keeps the 4-byte redundant varint.


def test_small_nested_message_gets_a_one_byte_size_like_upstream() -> None:
    hb = HeapBuffered(Message)
    child = hb.msg.begin_nested_message(3, Message)
    child.append_string(1, "foo")
    child.append_int(2, 42)
    assert hb.serialize() == bytes.fromhex("1a 07 0a03666f6f 102a")


def test_nested_messages_compact_innermost_first() -> None:
    hb = HeapBuffered(Message)
    a = hb.msg.begin_nested_message(1, Message)
    b = a.begin_nested_message(2, Message)
    b.append_int(3, 1)
    a.append_int(4, 2)
    hb.msg.append_int(5, 3)
    assert hb.serialize() == bytes.fromhex("0a 06 12 02 1801 2002 2803")


def test_nested_message_of_127_bytes_is_compacted_and_of_128_is_not() -> None:
    for payload, size_field in ((125, "7f"), (126, "80818000")):
        hb = HeapBuffered(Message, initial_slice_size=1024)
        hb.msg.begin_nested_message(1, Message).append_bytes(2, bytes(payload))
        data = hb.serialize()
        assert data[: 1 + len(size_field) // 2] == bytes.fromhex("0a" + size_field)
        assert len(data) == 1 + len(size_field) // 2 + 2 + payload


def test_nested_message_spanning_ranges_keeps_four_bytes() -> None:
    hb = HeapBuffered(Message, initial_slice_size=8, maximum_slice_size=8)
    child = hb.msg.begin_nested_message(1, Message)
    child.append_bytes(2, b"abcdef")
    assert hb.serialize() == bytes.fromhex("0a 88808000 1206") + b"abcdef"


def test_redirected_size_field_keeps_four_bytes() -> None:
    hb = HeapBuffered(Message)
    child = hb.msg.begin_nested_message(1, Message)
    child.append_int(2, 5)
    patch = bytearray(4)
    child.set_size_field(patch, 0)
    hb.msg.append_int(3, 1)
    assert patch == bytes.fromhex("82808000")
    assert hb.serialize() == bytes.fromhex("0a 00000000 1005 1801")


def test_redundant_varint_matches_abi() -> None:
    buf = bytearray(8)
    write_redundant_varint(buf, 2, 7)
    assert buf[2:6] == bytes.fromhex("87808000")
    write_redundant_varint(buf, 0, 0x0FFF_FFFF)
    assert buf[0:4] == bytes.fromhex("ffffff7f")
    with pytest.raises(ProtozeroError):
        write_redundant_varint(buf, 0, 0x1000_0000)


def test_setting_a_parent_field_finalizes_open_children(pb: dict[str, Any]) -> None:
    hb = HeapBuffered(Message)
    root = hb.msg
    a = root.begin_nested_message(14, Message)
    a.append_int(1, 1)
    b = a.begin_nested_message(14, Message)
    b.append_int(1, 2)
    assert [root.nested_message, a.nested_message] == [a, b]
    root.append_int(1, 3)
    assert a.is_finalized
    assert b.is_finalized
    assert root.nested_message is None
    c = root.begin_nested_message(14, Message)
    c.append_int(1, 4)
    parsed = pb["pztest.EveryField"].FromString(hb.serialize())
    assert parsed.field_int32 == 3
    assert [n.field_int32 for n in parsed.field_nested] == [1, 4]
    assert parsed.field_nested[0].field_nested[0].field_int32 == 2


def test_writing_a_finalized_message_raises() -> None:
    hb = HeapBuffered(Message)
    child = hb.msg.begin_nested_message(14, Message)
    hb.msg.append_int(1, 1)
    with pytest.raises(ProtozeroError, match="finalized"):
        child.append_int(1, 2)
    with pytest.raises(ProtozeroError, match="finalized"):
        child.begin_nested_message(14, Message)
    data = hb.serialize()
    with pytest.raises(ProtozeroError, match="finalized"):
        hb.msg.append_string(500, "late")
    assert hb.serialize() == data
    assert hb.msg.finalize() == len(data)


def test_writing_an_unbound_message_raises() -> None:
    with pytest.raises(ProtozeroError, match="reset"):
        Message().append_int(1, 1)


def test_scattered_writes_across_tiny_buffers_match_one_buffer(pb: dict[str, Any]) -> None:
    """Same fields; nested messages split across ranges keep 4-byte sizes (no compaction)."""
    parse = pb["pztest.EveryField"].FromString

    def fill(m: Message) -> None:
        m.append_int(1, 0x1234_5678)
        m.append_string(500, "x" * 40)
        n = m.begin_nested_message(14, Message)
        n.append_fixed64(8, 1)
        n.begin_nested_message(14, Message).append_double(12, 2.0)
        m.append_bytes(505, bytes(range(20)))

    reference = HeapBuffered(Message, initial_slice_size=4096)
    fill(reference.msg)
    expected = reference.serialize()
    for size in range(4, 17):
        hb = HeapBuffered(Message, initial_slice_size=size, maximum_slice_size=size)
        fill(hb.msg)
        data = hb.serialize()
        assert parse(data) == parse(expected), size
        assert len(data) >= len(expected)
        assert len(hb.slices()) > 1


def test_reserve_skips_unused_tail_and_written_counts_bytes() -> None:
    delegate = ListDelegate(8)
    w = ScatteredStreamWriter(delegate)
    w.write_bytes(b"abcdef")
    assert w.written() == 6
    offset = w.reserve_bytes(4)
    assert (len(delegate.buffers), offset) == (2, 0)
    assert w.written() == 10
    w.write_bytes(b"0123456789")
    assert w.written() == 20
    assert delegate.buffers[1][4:] == b"0123"
    assert delegate.buffers[2] == b"456789\xee\xee"
    with pytest.raises(ProtozeroError):
        w.reserve_bytes(9)


def test_size_field_redirected_to_a_patch_buffer() -> None:
    delegate = ListDelegate(64)
    w = ScatteredStreamWriter(delegate)
    root = Message()
    root.reset(w)
    child = root.begin_nested_message(14, Message)
    assert child.size_field_buffer is delegate.buffers[0]
    assert child.size_field_offset == 1
    patch = bytearray(4)
    child.set_size_field(patch, 0)
    child.append_int(1, 5)
    assert root.finalize() == 7
    assert patch == bytes.fromhex("82808000")
    assert delegate.buffers[0][1:5] == b"\xee" * 4


def test_writes_into_mmap_and_memoryview() -> None:
    region = mmap.mmap(-1, 4096)
    view = memoryview(bytearray(4096))
    for target in (region, view):
        w = ScatteredStreamWriter(ListDelegate(1))
        w.reset(target, 100, 200)
        m = Message()
        m.reset(w)
        m.append_int(1, 150)
        m.begin_nested_message(3, Message).append_string(1, "foo")
        assert m.finalize() == 3 + 1 + 1 + 5
        assert bytes(target[100:110]) == bytes.fromhex("089601 1a 05 0a03666f6f")
        w.reset(bytearray(), 0, 0)  # a compiled writer holds a buffer export until then
    region.close()


def test_root_message_reused_after_reset() -> None:
    delegate = ListDelegate(64)
    w = ScatteredStreamWriter(delegate)
    m = Message()
    m.reset(w)
    m.append_int(1, 1)
    assert m.finalize() == 2
    m.reset(w)
    m.append_string(2, "ab")
    assert m.finalize() == 4
    assert delegate.buffers[0][:6] == bytes.fromhex("0801 12026162")


class RecyclingDelegate:
    """Hands out the same 1 MiB buffer again and again: big messages without big memory."""

    def __init__(self) -> None:
        self.buf = bytearray(1 << 20)

    def get_new_buffer(self) -> tuple[WritableBuffer, int, int]:
        return self.buf, 0, len(self.buf)


def test_oversized_nested_message_is_refused() -> None:
    w = ScatteredStreamWriter(RecyclingDelegate())
    root = Message()
    root.reset(w)
    child = root.begin_nested_message(1, Message)
    block = bytes(1 << 20)
    for _ in range(256):
        child.append_raw(block)
    with pytest.raises(ProtozeroError, match="exceeds"):
        child.finalize()


def test_heap_buffer_rejects_bad_slice_sizes() -> None:
    with pytest.raises(ProtozeroError):
        HeapBuffered(Message, initial_slice_size=0)


def test_a_child_the_caller_kept_is_not_bound_again() -> None:
    hb = HeapBuffered(Message)
    first = hb.msg.begin_nested_message(1, Message)
    first.append_int(1, 1)
    second = hb.msg.begin_nested_message(2, Message)  # finalizes `first`, which is still held
    second.append_int(1, 2)
    assert second is not first
    assert first.is_finalized
    with pytest.raises(ProtozeroError):
        first.append_int(1, 3)
    hb.msg.begin_nested_message(3, Message).append_int(1, 4)  # dropped children: may be reused
    hb.msg.begin_nested_message(4, Message).append_int(1, 5)
    assert hb.serialize() == bytes.fromhex("0a020801 12020802 1a020804 22020805".replace(" ", ""))
