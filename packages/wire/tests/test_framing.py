"""Framing: golden bytes, reassembly, limits, and fuzzing of the frame decoder."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from perfetto_protos.common.commit_data_request_pb2 import CommitDataRequest
from perfetto_protos.ipc import producer_port_pb2 as pp
from perfetto_protos.ipc.wire_protocol_pb2 import IPCFrame
from perfetto_wire import FrameDecoder, FrameTooLargeError, encode_frame
from perfetto_wire._call_frames import (
    decode_invoke,
    decode_invoke_reply,
    encode_invoke,
    invoke_reply_header,
)
from perfetto_wire._framing import IPC_BUFFER_SIZE, MAX_PAYLOAD_SIZE, serialize

# BindService("ProducerPort") with request_id 1, as upstream's client sends it first
# (ClientImpl::BindService: IPCFrame{request_id, msg_bind_service{service_name}}).
GOLDEN_BIND = bytes.fromhex("12000000 1001 1a0e 0a0c 50726f6475636572506f7274")
# request_id 1, success, service_id 1, one method {id 1, "Sync"}.
GOLDEN_BIND_REPLY = bytes.fromhex("12000000 1001 220e 0801 1001 1a08 0801 1204 53796e63")
# request_id 2, service 1, method 11, empty args, drop_reply false (upstream always sets it).
GOLDEN_INVOKE = bytes.fromhex("0c000000 1002 2a08 0801 100b 1a00 2000")
# request_id 3, success, has_more, reply = GetAsyncCommandResponse{start_data_source{id 1}}.
GOLDEN_STREAMED = bytes.fromhex("0e000000 1003 320a 0801 1001 1a04 0a02 0801")

# Upstream serializes every IPC message with its generated classes, which write through
# protozero: the size of a nested message is reserved as 4 bytes and, once the message is
# complete, shrunk to 1 byte if the message has at most 127 bytes (and lies in the same 4 KiB
# heap slice as its size); otherwise it stays 4 bytes, a varint whose first three bytes carry
# the continuation bit. So a frame's member above 127 bytes has a 4-byte size.
LARGE_ARGS = b"a" * 200
# request_id 2, InvokeMethod (209 bytes: d1 81 80 00) {service 1, method 4, args, drop_reply}.
GOLDEN_LARGE_INVOKE = (
    bytes.fromhex("d8000000 1002 2a d1818000 0801 1004 1a c801")
    + LARGE_ARGS
    + bytes.fromhex("2001")
)
LARGE_REPLY = b"b" * 150
# request_id 3, InvokeMethodReply (157 bytes: 9d 81 80 00) {success, has_more false, reply}.
GOLDEN_LARGE_REPLY = bytes.fromhex("a4000000 1003 32 9d818000 0801 1000 1a 9601") + LARGE_REPLY


def bind_frame() -> IPCFrame:
    frame = IPCFrame(request_id=1)
    frame.msg_bind_service.service_name = "ProducerPort"
    return frame


def bind_reply_frame() -> IPCFrame:
    frame = IPCFrame(request_id=1)
    reply = frame.msg_bind_service_reply
    reply.success = True
    reply.service_id = 1
    reply.methods.add(id=1, name="Sync")
    return frame


def invoke_frame() -> IPCFrame:
    frame = IPCFrame(request_id=2)
    invoke = frame.msg_invoke_method
    invoke.service_id = 1
    invoke.method_id = 11
    invoke.args_proto = b""
    invoke.drop_reply = False
    return frame


def streamed_frame() -> IPCFrame:
    frame = IPCFrame(request_id=3)
    reply = frame.msg_invoke_method_reply
    reply.success = True
    reply.has_more = True
    command = pp.GetAsyncCommandResponse()
    command.start_data_source.new_instance_id = 1
    reply.reply_proto = command.SerializeToString()
    return frame


def large_invoke_frame() -> IPCFrame:
    frame = IPCFrame(request_id=2)
    invoke = frame.msg_invoke_method
    invoke.service_id = 1
    invoke.method_id = 4
    invoke.args_proto = LARGE_ARGS
    invoke.drop_reply = True
    return frame


def large_reply_frame() -> IPCFrame:
    frame = IPCFrame(request_id=3)
    reply = frame.msg_invoke_method_reply
    reply.success = True
    reply.has_more = False
    reply.reply_proto = LARGE_REPLY
    return frame


GOLDEN = [
    (GOLDEN_BIND, bind_frame),
    (GOLDEN_BIND_REPLY, bind_reply_frame),
    (GOLDEN_INVOKE, invoke_frame),
    (GOLDEN_STREAMED, streamed_frame),
    (GOLDEN_LARGE_INVOKE, large_invoke_frame),
    (GOLDEN_LARGE_REPLY, large_reply_frame),
]


@pytest.mark.parametrize(("golden", "make"), GOLDEN)
def test_encode_matches_golden_bytes(golden: bytes, make: Callable[[], IPCFrame]) -> None:
    assert encode_frame(make()) == golden


@pytest.mark.parametrize(("golden", "make"), GOLDEN)
def test_decode_golden_bytes(golden: bytes, make: Callable[[], IPCFrame]) -> None:
    assert FrameDecoder().feed(golden) == [make()]


def test_hand_written_frames_give_large_members_a_four_byte_size() -> None:
    assert encode_invoke(2, 1, 4, LARGE_ARGS, True) == GOLDEN_LARGE_INVOKE
    assert invoke_reply_header(3, False, len(LARGE_REPLY)) + LARGE_REPLY == GOLDEN_LARGE_REPLY


def test_hand_decoders_accept_four_byte_member_sizes() -> None:
    invoke = decode_invoke(GOLDEN_LARGE_INVOKE, 4, len(GOLDEN_LARGE_INVOKE))
    assert invoke is not None
    assert invoke[:3] == (2, 1, 4)
    assert bytes(invoke[3]) == LARGE_ARGS
    assert invoke[4]
    reply = decode_invoke_reply(GOLDEN_LARGE_REPLY, 4, len(GOLDEN_LARGE_REPLY))
    assert reply is not None
    assert reply[:3] == (3, True, False)
    assert bytes(reply[3]) == LARGE_REPLY


def test_nested_message_crossing_the_first_heap_slice_keeps_four_bytes() -> None:
    # 42 entries of 100 bytes (data: 22 62 + 98 bytes). While entry k is written its size
    # takes 4 bytes, so its payload ends at 102 * k + 105: entries 0-39 end within the first
    # 4096-byte slice and shrink to a 1-byte size; entry 40 (written from 4080) runs into the
    # second slice and keeps 4 bytes; entry 41 lies in the second slice and shrinks again.
    request = CommitDataRequest()
    for _ in range(42):
        request.chunks_to_move.add(data=bytes(98))
    entry = bytes.fromhex("2262") + bytes(98)
    expected = (b"\x0a\x64" + entry) * 40 + b"\x0a\xe4\x80\x80\x00" + entry + b"\x0a\x64" + entry
    assert serialize(request) == expected
    assert CommitDataRequest.FromString(expected) == request


def test_streamed_reply_carries_the_command() -> None:
    (frame,) = FrameDecoder().feed(GOLDEN_STREAMED)
    command = pp.GetAsyncCommandResponse.FromString(frame.msg_invoke_method_reply.reply_proto)
    assert command.start_data_source.new_instance_id == 1


def test_one_byte_at_a_time() -> None:
    stream = b"".join(golden for golden, _ in GOLDEN)
    decoder = FrameDecoder()
    frames: list[IPCFrame] = []
    for index in range(len(stream)):
        frames += decoder.feed(stream[index : index + 1])
    assert frames == [make() for _, make in GOLDEN]
    assert decoder.buffered == 0


def test_zero_length_frames_are_skipped() -> None:
    stream = b"\0\0\0\0" + GOLDEN_BIND + b"\0\0\0\0" * 3 + GOLDEN_INVOKE
    assert FrameDecoder().feed(stream) == [bind_frame(), invoke_frame()]


def test_unparsable_frame_is_dropped_and_decoding_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    garbage = b"\xff\xff\xff"
    stream = GOLDEN_BIND + len(garbage).to_bytes(4, "little") + garbage + GOLDEN_INVOKE
    with caplog.at_level(logging.DEBUG, logger="perfetto_wire"):
        frames = FrameDecoder().feed(stream)
    assert frames == [bind_frame(), invoke_frame()]
    assert "does not parse" in caplog.text


def test_largest_frame_is_accepted() -> None:
    frame = IPCFrame(request_id=1)
    overhead = len(frame.SerializeToString()) + 1 + 3  # tag + 3-byte length varint
    frame.data_for_testing.append(b"x" * (MAX_PAYLOAD_SIZE - overhead))
    encoded = encode_frame(frame)
    assert len(encoded) == IPC_BUFFER_SIZE
    assert FrameDecoder().feed(encoded) == [frame]


def test_oversize_announcement_raises_at_once_and_forever() -> None:
    decoder = FrameDecoder()
    header = (MAX_PAYLOAD_SIZE + 1).to_bytes(4, "little")
    with pytest.raises(FrameTooLargeError) as info:
        decoder.feed(GOLDEN_BIND + header)
    assert info.value.payload_size == MAX_PAYLOAD_SIZE + 1
    with pytest.raises(FrameTooLargeError):
        decoder.feed(GOLDEN_BIND)


def test_encode_refuses_oversize_frames() -> None:
    frame = IPCFrame(request_id=1)
    frame.data_for_testing.append(b"x" * IPC_BUFFER_SIZE)
    with pytest.raises(FrameTooLargeError):
        encode_frame(frame)


def test_decoded_frames_do_not_alias_the_input_buffer() -> None:
    buffer = bytearray(GOLDEN_STREAMED)
    (frame,) = FrameDecoder().feed(memoryview(buffer))
    buffer[:] = b"\0" * len(buffer)
    assert frame == streamed_frame()


frames_strategy = st.lists(
    st.builds(
        lambda request_id, blobs: IPCFrame(request_id=request_id, data_for_testing=blobs),
        st.integers(min_value=0, max_value=2**64 - 1),
        st.lists(st.binary(max_size=300), max_size=3),
    ),
    max_size=8,
)


@settings(max_examples=200, deadline=None)
@given(frames=frames_strategy, cuts=st.lists(st.integers(min_value=1, max_value=64), max_size=40))
def test_any_chunking_reassembles_the_same_frames(frames: list[IPCFrame], cuts: list[int]) -> None:
    stream = b"".join(encode_frame(frame) for frame in frames)
    decoder = FrameDecoder()
    received: list[IPCFrame] = []
    position = 0
    for cut in cuts:
        received += decoder.feed(stream[position : position + cut])
        position += cut
    received += decoder.feed(stream[position:])
    assert received == [frame for frame in frames if frame.ByteSize()]
    assert decoder.buffered == 0


@settings(max_examples=300, deadline=None)
@given(chunks=st.lists(st.binary(max_size=200), max_size=10))
def test_random_bytes_never_escape_the_decoder(chunks: list[bytes]) -> None:
    decoder = FrameDecoder()
    for chunk in chunks:
        try:
            frames = decoder.feed(chunk)
        except FrameTooLargeError:
            return
        assert all(isinstance(frame, IPCFrame) for frame in frames)
    assert decoder.buffered <= sum(len(chunk) for chunk in chunks)


@settings(max_examples=300, deadline=None)
@given(
    data=st.data(),
    flips=st.lists(st.tuples(st.integers(min_value=0), st.integers(0, 255)), max_size=6),
)
def test_mutated_frames_never_escape_the_decoder(
    data: st.DataObject, flips: list[tuple[int, int]]
) -> None:
    stream = bytearray(b"".join(golden for golden, _ in GOLDEN))
    for position, value in flips:
        stream[position % len(stream)] = value
    cut = data.draw(st.integers(min_value=0, max_value=len(stream)))
    decoder = FrameDecoder()
    frames: list[IPCFrame] = []
    try:
        frames += decoder.feed(bytes(stream[:cut]))
        frames += decoder.feed(bytes(stream[cut:]))
    except FrameTooLargeError:
        frames = []
    assert all(isinstance(frame, IPCFrame) for frame in frames)


# Small values too: the encoders have fast paths for one- to three-byte varints.
u64 = (
    st.integers(min_value=0, max_value=0x4000)
    | st.integers(min_value=0x4000, max_value=0x200000)
    | st.integers(min_value=0, max_value=2**64 - 1)
)
u32 = st.integers(min_value=0, max_value=0x80) | st.integers(min_value=0, max_value=2**32 - 1)


@settings(max_examples=200, deadline=None)
@given(
    request_id=u64,
    service_id=u32,
    method_id=u32,
    args=st.binary(max_size=0x80) | st.binary(max_size=400),
    drop=st.booleans(),
)
def test_hand_written_invoke_matches_protobuf(
    request_id: int, service_id: int, method_id: int, args: bytes, drop: bool
) -> None:
    frame = IPCFrame(request_id=request_id)
    call = frame.msg_invoke_method
    call.service_id, call.method_id, call.args_proto, call.drop_reply = (
        service_id,
        method_id,
        args,
        drop,
    )
    assert encode_invoke(request_id, service_id, method_id, args, drop) == encode_frame(frame)


@settings(max_examples=200, deadline=None)
@given(
    request_id=u64,
    has_more=st.booleans(),
    reply=st.binary(max_size=0x80) | st.binary(max_size=400),
)
def test_hand_written_reply_matches_protobuf(request_id: int, has_more: bool, reply: bytes) -> None:
    frame = IPCFrame(request_id=request_id)
    answer = frame.msg_invoke_method_reply
    answer.success, answer.has_more, answer.reply_proto = True, has_more, reply
    encoded = invoke_reply_header(request_id, has_more, len(reply)) + reply
    assert encoded == encode_frame(frame)


def test_hand_written_frames_respect_the_size_limit() -> None:
    with pytest.raises(FrameTooLargeError):
        invoke_reply_header(1, False, MAX_PAYLOAD_SIZE)
    with pytest.raises(FrameTooLargeError):
        encode_invoke(1, 1, 1, b"x" * MAX_PAYLOAD_SIZE, False)
