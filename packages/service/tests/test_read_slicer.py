"""ReadBuffers replies and the trace-file form: same bytes, upstream's cut rule."""

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
