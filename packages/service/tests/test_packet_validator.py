"""Packet validation: reserved fields, malformed wire format, truncation."""

from __future__ import annotations

import pytest
from google.protobuf import empty_pb2
from google.protobuf.message import DecodeError
from hypothesis import given, settings
from hypothesis import strategies as st
from perfetto_protos.trace import trace_packet_pb2
from perfetto_protos.trace.track_event import track_event_pb2
from perfetto_service.core._packet_validator import (
    SERVICE_RESERVED_FIELDS,
    validate_packet,
    validate_packet_bytes,
    validate_packet_span,
)
from protozero import encode_varint


def _key(field: int, wire_type: int) -> bytes:
    return encode_varint((field << 3) | wire_type)


def test_a_typical_producer_packet_is_valid() -> None:
    packet = trace_packet_pb2.TracePacket()
    packet.timestamp = 123456789
    packet.sequence_flags = trace_packet_pb2.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
    packet.track_event.name = "slice"
    packet.track_event.type = track_event_pb2.TrackEvent.TYPE_SLICE_BEGIN
    packet.track_event.track_uuid = 42
    packet.for_testing.str = "x" * 300
    data = packet.SerializeToString()
    assert validate_packet_bytes(data)
    # The same packet split in arbitrary places across slices.
    assert validate_packet([data[:3], data[3:17], data[17:]])
    assert validate_packet_bytes(b"")


@pytest.mark.parametrize("field", sorted(SERVICE_RESERVED_FIELDS))
@pytest.mark.parametrize("wire_type", [0, 1, 2, 5])
def test_service_reserved_fields_are_refused_whatever_their_type(
    field: int, wire_type: int
) -> None:
    body = {0: b"\x01", 1: bytes(8), 2: b"\x00", 5: bytes(4)}[wire_type]
    assert not validate_packet_bytes(b"\x40\x01" + _key(field, wire_type) + body)


def test_the_reserved_list_is_upstreams() -> None:
    upstream = {3, 10, 33, 35, 36, 50, 69, 79, 98, 124, 125, 133}
    assert upstream == SERVICE_RESERVED_FIELDS


@pytest.mark.parametrize(
    "data",
    [
        _key(20, 3) + _key(20, 4),  # a group, even a well-formed one
        _key(20, 4),
        _key(20, 6) + b"\x00",
        _key(20, 7) + b"\x00",
        _key(0, 0) + b"\x01",  # field number 0
        b"\x40" + b"\xff" * 10 + b"\x01",  # 11-byte varint
        b"\x40\x80",  # truncated varint
        b"\x41" + bytes(7),  # truncated fixed64
        b"\x45" + bytes(3),  # truncated fixed32
        b"\x5a\x05abc",  # truncated length-delimited
        b"\x5a",  # missing length
        b"\x5a\x80\x80\x80\x80\x01",  # length 0x10000000 > 0x0FFFFFFF
        b"\xc0",  # truncated key
        b"\xf8\xff\xff\xff\xff\x01\x00",  # field number beyond 2**29 - 1
    ],
)
def test_malformed_packets_are_refused(data: bytes) -> None:
    assert not validate_packet_bytes(data)


def test_ten_byte_varints_and_redundant_lengths_are_accepted() -> None:
    assert validate_packet_bytes(b"\x40" + b"\xff" * 9 + b"\x01")
    assert validate_packet_bytes(b"\x5a\x83\x80\x80\x00abc")


_field = st.one_of(
    st.tuples(st.integers(1, 2000), st.just(0), st.integers(0, (1 << 64) - 1).map(encode_varint)),
    st.tuples(st.integers(1, 2000), st.just(1), st.binary(min_size=8, max_size=8)),
    st.tuples(st.integers(1, 2000), st.just(5), st.binary(min_size=4, max_size=4)),
    st.tuples(
        st.integers(1, 2000),
        st.just(2),
        st.binary(max_size=40).map(lambda b: encode_varint(len(b)) + b),
    ),
)


@given(fields=st.lists(_field, max_size=8), cut=st.integers(0, 400))
@settings(max_examples=300, deadline=None)
def test_well_formed_packets_pass_unless_cut_inside_a_field(
    fields: list[tuple[int, int, bytes]], cut: int
) -> None:
    encoded = [_key(number, wire) + body for number, wire, body in fields]
    data = b"".join(encoded)
    reserved = [number in SERVICE_RESERVED_FIELDS for number, _, _ in fields]
    assert validate_packet_bytes(data) == (not any(reserved))
    # Where each field ends: a prefix ending there is a shorter well-formed packet.
    ends = [0]
    for item in encoded:
        ends.append(ends[-1] + len(item))
    length = min(cut, len(data))
    expected = length in ends and not any(reserved[: ends.index(length)])
    assert validate_packet_bytes(data[:length]) == expected


@given(data=st.binary(max_size=64))
@settings(max_examples=300, deadline=None)
def test_whatever_passes_is_well_formed_protobuf(data: bytes) -> None:
    if validate_packet_bytes(data):
        try:
            empty_pb2.Empty.FromString(data)
        except DecodeError:
            pytest.fail(f"validated bytes protobuf cannot parse: {data.hex()}")


@given(
    fields=st.lists(_field, max_size=6),
    before=st.binary(max_size=12),
    after=st.binary(max_size=12),
    cut=st.integers(0, 300),
)
@settings(max_examples=300, deadline=None)
def test_validating_a_span_of_a_larger_buffer_ignores_the_bytes_around_it(
    fields: list[tuple[int, int, bytes]], before: bytes, after: bytes, cut: int
) -> None:
    packet = b"".join(_key(number, wire) + body for number, wire, body in fields)
    packet = packet[: min(cut, len(packet))]
    data = bytearray(before + packet + after)
    start = len(before)
    assert validate_packet_span(data, start, start + len(packet)) == validate_packet_bytes(packet)


def test_a_truncated_packet_followed_by_more_data_is_still_refused() -> None:
    data = b"\x40\x80\x80" + b"\x81\x01" * 8  # the varint "ends" only in the next bytes
    assert not validate_packet_span(data, 0, 3)
    assert not validate_packet_span(b"\x5a\x05abc" + b"defgh", 0, 5)
