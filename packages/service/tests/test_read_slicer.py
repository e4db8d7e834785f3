"""ReadBuffers replies and the trace-file form: same bytes, upstream's cut rule and framing."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from perfetto_protos.ipc import consumer_port_pb2
from perfetto_protos.upstream import parse_upstream_trace
from perfetto_service import trace_file_bytes
from perfetto_service.core._read_slicer import (
    IPC_BUFFER_SIZE,
    packet_preamble,
    read_buffers_replies,
)
from perfetto_wire import serialize

_BUDGET = IPC_BUFFER_SIZE - 64


def _reassemble(replies: list[bytes]) -> list[bytes]:
    packets: list[bytes] = []
    pending = b""
    for reply in replies:
        response = consumer_port_pb2.ReadBuffersResponse.FromString(reply)
        for piece in response.slices:
            pending += piece.data
            if piece.last_slice_for_packet:
                packets.append(pending)
                pending = b""
    assert pending == b""
    return packets


_packets = st.lists(
    st.lists(st.binary(max_size=3000), min_size=1, max_size=4),
    max_size=30,
)


@given(packets=_packets, big=st.integers(0, 3))
@settings(max_examples=150, deadline=None)
def test_replies_carry_every_packet_and_are_cut_like_upstream(
    packets: list[list[bytes]], big: int
) -> None:
    # A few near-chunk-sized slices so that replies have to be cut.
    packets = packets + [[bytes([i]) * 32000, b"suffix"] for i in range(big * 3)]
    replies = read_buffers_replies(packets)
    assert _reassemble(replies) == [b"".join(p) for p in packets]
    sizes = [
        [len(s.data) + 16 for s in consumer_port_pb2.ReadBuffersResponse.FromString(r).slices]
        for r in replies
    ]
    for index, reply_sizes in enumerate(sizes):
        assert sum(reply_sizes) <= _BUDGET
        if index + 1 < len(sizes):
            # Cut only because the next slice would not have fitted.
            assert sum(reply_sizes) + sizes[index + 1][0] > _BUDGET
    for reply in replies:
        # 64 bytes cover the InvokeMethodReply and frame around the reply.
        assert len(reply) + 64 <= IPC_BUFFER_SIZE


def test_no_packets_still_make_one_empty_reply() -> None:
    assert read_buffers_replies([]) == [b""]


def test_slices_are_length_prefixed_like_protozero_and_flag_the_last_one() -> None:
    big = bytes(200)
    (reply,) = read_buffers_replies([[b"ab", big]])
    assert reply == (
        b"\x12\x06"
        + b"\x0a\x02ab"
        + b"\x10\x00"
        # Past 127 bytes protozero keeps the 4-byte redundant length it reserved.
        + b"\x12\xcd\x81\x80\x00"
        + b"\x0a\xc8\x01"
        + big
        + b"\x10\x01"
    )


_short_slices = st.one_of(st.binary(max_size=130), st.binary(min_size=100, max_size=5000))


@given(packets=st.lists(st.lists(_short_slices, min_size=1, max_size=3), max_size=120))
@settings(max_examples=150, deadline=None)
def test_slice_lengths_are_those_upstreams_protozero_serializer_writes(
    packets: list[list[bytes]],
) -> None:
    # perfetto_wire.serialize writes a message as upstream's generated classes do, through
    # protozero's 4 KiB heap slices.
    for reply in read_buffers_replies(packets):
        response = consumer_port_pb2.ReadBuffersResponse.FromString(reply)
        assert reply == serialize(response)


def test_a_short_slice_across_a_4_kib_heap_slice_keeps_the_4_byte_length() -> None:
    # The first Slice (1 + 4 + 4005 bytes) leaves 86 bytes of upstream's first heap slice:
    # too few for the next one's 4 reserved length bytes and 104 bytes.
    (reply,) = read_buffers_replies([[bytes(4000), bytes(100), b"sfx"]])
    assert reply[:4010] == b"\x12\xa5\x9f\x80\x00\x0a\xa0\x1f" + bytes(4000) + b"\x10\x00"
    assert reply[4010:] == (
        b"\x12\xe8\x80\x80\x00"
        + b"\x0a\x64"
        + bytes(100)
        + b"\x10\x00"
        # The next heap slice has room for it all: a 1-byte length again.
        + b"\x12\x07\x0a\x03sfx\x10\x01"
    )


def test_trace_file_form_holds_the_same_packets() -> None:
    unknown = b"\x82\x7d\xc8\x01" + bytes(200)  # field 2000, 200 bytes
    packets = [[b"\x40\x01", b"\x18\x00\x50\x02"], [b"\x40\x02" + unknown, b"\x18\x00\x50\x02"]]
    data = trace_file_bytes(packets)
    assert data.startswith(b"\x0a\x06\x40\x01\x18\x00\x50\x02")
    assert data[8:11] == packet_preamble(210) == b"\x0a\xd2\x01"
    trace: Any = parse_upstream_trace(data)
    assert [p.timestamp for p in trace.packet] == [1, 2]
    assert [p.trusted_packet_sequence_id for p in trace.packet] == [2, 2]
    assert _reassemble(read_buffers_replies(packets)) == [b"".join(p) for p in packets]


def test_a_packet_bigger_than_a_reply_is_cut_into_slices_across_replies() -> None:
    huge = bytes(range(256)) * 1200  # 300 KiB, e.g. reassembled from many chunks
    packets = [[b"\x40\x01", b"sfx"], [huge, b"sfx"], [b"\x40\x02", b"sfx"]]
    replies = read_buffers_replies(packets)
    assert len(replies) >= 3
    for reply in replies:
        assert len(reply) + 64 <= IPC_BUFFER_SIZE
    assert _reassemble(replies) == [b"".join(p) for p in packets]
