"""ProtoDecoder: typed accessors, nested views, packed fields and malformed input."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from protozero import Field, PackedRepeated, ProtoDecoder, encode_varint, read_varint


def _touch_everything(decoder: ProtoDecoder, depth: int = 0) -> int:
    """Calls every accessor on every field, recursing into payloads; returns fields seen."""
    seen = 0
    for field in decoder:
        seen += 1
        values: list[Any] = [
            field.as_uint64(),
            field.as_uint32(),
            field.as_int64(),
            field.as_int32(),
            field.as_sint64(),
            field.as_sint32(),
            field.as_bool(),
            field.as_fixed32(),
            field.as_fixed64(),
            field.as_float(),
            field.as_double(),
            field.as_string(),
            repr(field),
        ]
        assert len(values) == 13
        packed: list[PackedRepeated[Any]] = [
            field.packed_varints(),
            field.packed_fixed32(),
            field.packed_fixed64(),
            field.packed_floats(),
            field.packed_doubles(),
        ]
        for it in packed:
            assert len(list(it)) <= field.size
            assert it.error is None or isinstance(it.error, str)
        if depth < 3:
            seen += _touch_everything(field.as_message(), depth + 1)
    assert (decoder.error is None) == (decoder.error_offset is None)
    if decoder.error_offset is not None:
        assert 0 <= decoder.error_offset < len(decoder)
    return seen


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=200))
def test_random_bytes_never_raise(data: bytes) -> None:
    decoder = ProtoDecoder(data)
    _touch_everything(decoder)
    assert sum(1 for _ in decoder) <= len(data)


VALID = bytes.fromhex(
    "08 96 01"  # 1: varint 150
    "12 07 0a 03 66 6f 6f 10 2a"  # 2: nested {1: "foo", 2: 42}
    "1d 01 00 00 00"  # 3: fixed32 1
    "21 02 00 00 00 00 00 00 00"  # 4: fixed64 2
    "2a 04 01 ac 02 03"  # 5: packed varints 1, 300, 3
)


@settings(max_examples=300, deadline=None)
@given(
    edits=st.lists(st.tuples(st.integers(0, len(VALID) - 1), st.integers(0, 255)), max_size=4),
    cut=st.integers(0, len(VALID)),
)
def test_mutated_messages_never_raise(edits: list[tuple[int, int]], cut: int) -> None:
    data = bytearray(VALID)
    for index, value in edits:
        data[index] = value
    _touch_everything(ProtoDecoder(bytes(data[:cut])))


def test_typed_accessors_and_nested_view() -> None:
    decoder = ProtoDecoder(VALID)
    fields = list(decoder)
    assert decoder.error is None
    assert [(f.id, f.type) for f in fields] == [(1, 0), (2, 2), (3, 5), (4, 1), (5, 2)]
    assert fields[0].as_uint64() == 150
    nested = fields[1].as_message()
    assert [(f.id, f.as_string() if f.type == 2 else f.as_int32()) for f in nested] == [
        (1, "foo"),
        (2, 42),
    ]
    assert fields[2].as_fixed32() == 1
    assert fields[3].as_fixed64() == 2
    assert list(fields[4].packed_varints()) == [1, 300, 3]


def test_payload_views_do_not_copy() -> None:
    buf = bytearray(VALID)
    field = ProtoDecoder(buf).find(2)
    assert field is not None
    view = field.as_bytes()
    assert view.obj is buf
    buf[7] = ord("g")
    inner = field.as_message().find(1)
    assert inner is not None
    assert inner.as_string() == "goo"


def test_find_and_find_all() -> None:
    data = bytes.fromhex("0801 1002 0803")
    decoder = ProtoDecoder(data)
    first = decoder.find(1)
    assert first is not None
    assert first.as_int32() == 1
    assert [f.as_int32() for f in decoder.find_all(1)] == [1, 3]
    assert decoder.find(7) is None


def test_signed_views() -> None:
    neg = encode_varint(-2)
    field = next(iter(ProtoDecoder(b"\x08" + neg)))
    assert len(neg) == 10
    assert field.as_int64() == -2
    assert field.as_int32() == -2
    assert field.as_uint32() == 0xFFFF_FFFE
    zz = next(iter(ProtoDecoder(b"\x08\x03")))
    assert (zz.as_sint32(), zz.as_sint64()) == (-2, -2)


@pytest.mark.parametrize(
    ("data", "error", "offset", "count"),
    [
        (b"\x08\x01\x08\x80", "truncated varint of field 1", 2, 1),
        (b"\x08" + b"\xff" * 10 + b"\x01", "truncated varint", 0, 0),
        (b"\x00\x01", "field id 0", 0, 0),
        (b"\x0b", "unsupported wire type 3", 0, 0),
        (b"\x0c", "unsupported wire type 4", 0, 0),
        (b"\x0e\x00", "unsupported wire type 6", 0, 0),
        (b"\x08\x01\x12\x05abc", "overruns", 2, 1),
        (b"\x0d\x01\x02", "truncated fixed32", 0, 0),
        (b"\x09\x01\x02\x03", "truncated fixed64", 0, 0),
        (b"\x80", "truncated or overlong field tag", 0, 0),
    ],
)
def test_malformed_input_stops_and_reports(
    data: bytes, error: str, offset: int, count: int
) -> None:
    decoder = ProtoDecoder(data)
    assert len(list(decoder)) == count
    assert decoder.error is not None
    assert error in decoder.error
    assert decoder.error_offset == offset


def test_field_ids_above_the_maximum_are_skipped() -> None:
    too_big = encode_varint(((1 << 29) << 3) | 0) + b"\x05"
    decoder = ProtoDecoder(too_big + b"\x08\x07")
    assert [(f.id, f.as_int32()) for f in decoder] == [(1, 7)]
    assert decoder.error is None


def test_packed_fields_with_partial_items_report() -> None:
    field = next(iter(ProtoDecoder(b"\x0a\x05\x01\x00\x00\x00\x02")))
    it = field.packed_fixed32()
    assert list(it) == [1]
    assert it.error is not None
    varints = field.packed_varints()
    assert list(varints) == [1, 0, 0, 0, 2]
    assert varints.error is None
    bad = next(iter(ProtoDecoder(b"\x0a\x02\x01\x80"))).packed_varints()
    assert list(bad) == [1]
    assert bad.error is not None


def test_non_byte_memoryviews_are_read_as_bytes() -> None:
    words = memoryview(bytearray(b"\x08\x01\x10\x02")).cast("H")
    assert [f.as_int32() for f in ProtoDecoder(words)] == [1, 2]


def test_field_repr_names_id_and_value() -> None:
    fields: list[Field] = list(ProtoDecoder(b"\x08\x05\x12\x01a"))
    assert repr(fields[0]) == "Field(id=1, type=0, value=5)"
    assert repr(fields[1]) == "Field(id=2, type=2, size=1)"


@settings(deadline=None)
@given(st.integers(min_value=0, max_value=2**64 - 1), st.binary(max_size=4))
def test_read_varint_reads_what_encode_varint_wrote(value: int, tail: bytes) -> None:
    data = encode_varint(value) + tail
    assert read_varint(data, 0, len(data)) == (value, len(encode_varint(value)))


@pytest.mark.parametrize("end", [3, 100, 2**40])
def test_read_varint_never_reads_past_the_buffer(end: int) -> None:
    # A varint whose last byte would lie beyond the buffer is malformed whatever `end` says.
    assert read_varint(b"\x80\x80\x80", 0, end) == (0, -1)
    assert read_varint(b"\x80\x80\x80", -2, end) == (0, -1)
    assert read_varint(b"\x96\x01", 0, end) == (150, 2)
