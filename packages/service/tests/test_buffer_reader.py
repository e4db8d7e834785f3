"""From TraceBuffer to trace bytes: validation, trusted suffix, sequence ids."""

from __future__ import annotations

from typing import Any

from perfetto_protos.trace import trace_packet_pb2
from perfetto_protos.upstream import parse_upstream_trace
from perfetto_service import trace_file_bytes
from perfetto_service.core._buffer_reader import (
    read_producer_packets,
    read_producer_packets_as_replies,
    read_producer_packets_as_trace,
)
from perfetto_service.core._read_slicer import ReplyWriter, read_buffers_replies
from perfetto_service.core._trace_buffer import PacketSequenceProperties, TraceBuffer
from perfetto_service.core._trusted_fields import TrustedFieldsWriter
from service_testlib import Chunk, ChunkPacker, copy, fragment, seq


def _test_event(counter: int, text: str = "") -> bytes:
    packet = trace_packet_pb2.TracePacket()
    packet.timestamp = 1000 + counter
    packet.for_testing.counter = counter
    packet.for_testing.str = text
    return packet.SerializeToString()


def _trace(buffer: TraceBuffer, trusted: TrustedFieldsWriter) -> tuple[Any, int]:
    result = read_producer_packets(buffer, trusted, threshold=1 << 30)
    assert not result.hit_threshold
    return parse_upstream_trace(trace_file_bytes(result.packets)), result.invalid_packets


def test_producer_packets_get_the_trusted_suffix_of_their_sequence() -> None:
    buffer = TraceBuffer(1 << 16)
    trusted = TrustedFieldsWriter()
    writer_a = seq(producer=1, writer=1, uid=1000, pid=321)
    writer_b = seq(producer=2, writer=4, uid=2000, pid=None)
    remote = PacketSequenceProperties(3, 0, 55, 1, machine_id=0xABCD)
    packer = ChunkPacker(payload_size=128)
    for i in range(3):
        packer.add(_test_event(i, "a" * 60))
    for chunk in packer.flush():
        copy(buffer, writer_a, chunk)
    copy(buffer, writer_b, Chunk(0, 1, 0, fragment(_test_event(10))))
    copy(buffer, remote, Chunk(0, 1, 0, fragment(_test_event(20))))
    trace, invalid = _trace(buffer, trusted)
    assert invalid == 0
    counters = [p.for_testing.counter for p in trace.packet]
    assert counters == [0, 1, 2, 10, 20]
    first, second, _, from_b, from_remote = trace.packet
    assert (first.trusted_uid, first.trusted_packet_sequence_id, first.trusted_pid) == (
        1000,
        2,
        321,
    )
    assert first.previous_packet_dropped == 1
    assert not second.HasField("previous_packet_dropped")
    assert (from_b.trusted_uid, from_b.trusted_packet_sequence_id) == (2000, 3)
    assert not from_b.HasField("trusted_pid")
    assert from_remote.machine_id == 0xABCD
    assert from_remote.trusted_packet_sequence_id == 4
    assert not first.HasField("machine_id")
    # Sequence ids stick to their (machine, producer, writer) in later reads.
    copy(buffer, writer_b, Chunk(1, 1, 0, fragment(_test_event(11))))
    trace, _ = _trace(buffer, trusted)
    assert [p.trusted_packet_sequence_id for p in trace.packet] == [3]
    assert trusted.sequence_id(0, 1, 1) == 2


def test_packets_writing_service_fields_or_malformed_are_dropped_and_counted() -> None:
    buffer = TraceBuffer(1 << 16)
    spoofed = trace_packet_pb2.TracePacket(trusted_uid=0, timestamp=5).SerializeToString()
    truncated = _test_event(1, "truncated")[:-3]
    payload = fragment(_test_event(1)) + fragment(spoofed) + fragment(truncated)
    payload += fragment(_test_event(2))
    copy(buffer, seq(), Chunk(0, 4, 0, payload))
    trace, invalid = _trace(buffer, TrustedFieldsWriter())
    assert invalid == 2
    assert [p.for_testing.counter for p in trace.packet] == [1, 2]
    assert all(p.trusted_uid == 1000 for p in trace.packet)


def test_fragmented_packets_are_validated_whole() -> None:
    buffer = TraceBuffer(1 << 16)
    packer = ChunkPacker(payload_size=40)
    packer.add(_test_event(1, "x" * 100))
    packer.add(_test_event(2, "z" * 100) + b"\x18\x05")  # trusted_uid at the very end
    packer.add(_test_event(3, "w" * 100))
    chunks = packer.flush()
    assert len(chunks) > 6
    for chunk in chunks:
        copy(buffer, seq(), chunk)
    trace, invalid = _trace(buffer, TrustedFieldsWriter())
    assert invalid == 1
    assert [p.for_testing.counter for p in trace.packet] == [1, 3]
    assert trace.packet[1].for_testing.str == "w" * 100


def test_reading_stops_after_the_packet_that_reaches_the_threshold() -> None:
    buffer = TraceBuffer(1 << 16)
    payload = b"".join(fragment(_test_event(i, "y" * 80)) for i in range(10))
    copy(buffer, seq(), Chunk(0, 10, 0, payload))
    trusted = TrustedFieldsWriter()
    first = read_producer_packets(buffer, trusted, threshold=250)
    assert first.hit_threshold
    assert len(first.packets) == 3
    assert first.size == sum(len(s) for p in first.packets for s in p)
    rest = read_producer_packets(buffer, trusted, threshold=1 << 20)
    assert not rest.hit_threshold
    assert len(rest.packets) == 7
    # IPC and file forms carry identical packets.
    replies = read_buffers_replies(rest.packets)
    from_file = parse_upstream_trace(trace_file_bytes(rest.packets))
    assert len(replies) == 1
    assert [p.for_testing.counter for p in from_file.packet] == list(range(3, 10))  # type: ignore[attr-defined]


def test_negative_uid_is_written_as_int32() -> None:
    buffer = TraceBuffer(4096)
    copy(buffer, seq(uid=0xFFFFFFFE, pid=-1), Chunk(0, 1, 0, fragment(_test_event(1))))
    trace, _ = _trace(buffer, TrustedFieldsWriter())
    assert trace.packet[0].trusted_uid == -2
    assert trace.packet[0].trusted_pid == -1


def test_reading_straight_into_trace_bytes_gives_the_same_trace() -> None:
    packer = ChunkPacker(payload_size=100)
    for i in range(40):
        packer.add(_test_event(i, "q" * (i * 7)))
    chunks = packer.flush()
    spoofed = trace_packet_pb2.TracePacket(trusted_pid=1).SerializeToString()
    buffers = [TraceBuffer(1 << 16), TraceBuffer(1 << 16)]
    for buffer in buffers:
        for chunk in chunks:
            copy(buffer, seq(), chunk)
        copy(buffer, seq(writer=2), Chunk(0, 1, 0, fragment(spoofed)))
    slices = read_producer_packets(buffers[0], TrustedFieldsWriter(), threshold=1 << 20)
    direct = read_producer_packets_as_trace(buffers[1], TrustedFieldsWriter(), threshold=1 << 20)
    assert direct.trace == trace_file_bytes(slices.packets)
    assert (direct.size, direct.packets, direct.invalid_packets) == (slices.size, 40, 1)
    assert not direct.hit_threshold
    assert buffers[0].stats.as_dict() == buffers[1].stats.as_dict()


def test_reading_straight_into_replies_gives_the_same_replies() -> None:
    # Packets of 1 to about 100 KiB (fragmented over chunks), one invalid, read in parts of
    # several thresholds: each part's replies are those of its packets, byte for byte.
    packer = ChunkPacker(payload_size=4000)
    for i in range(300):
        packer.add(_test_event(i, "q" * (i * i if i % 50 == 7 else i % 130)))
    chunks = packer.flush()
    spoofed = trace_packet_pb2.TracePacket(trusted_pid=1).SerializeToString()
    buffers = [TraceBuffer(1 << 21), TraceBuffer(1 << 21)]
    for buffer in buffers:
        for chunk in chunks:
            copy(buffer, seq(), chunk)
        copy(buffer, seq(writer=2), Chunk(0, 1, 0, fragment(spoofed)))
    trusted = [TrustedFieldsWriter(), TrustedFieldsWriter()]
    read = 0
    for threshold in (1, 300, 32768, 1 << 30):
        slices = read_producer_packets(buffers[0], trusted[0], threshold)
        writer = ReplyWriter()
        writer.add_packet((b"service packet",))
        direct = read_producer_packets_as_replies(buffers[1], trusted[1], threshold, writer)
        assert writer.replies() == read_buffers_replies([(b"service packet",), *slices.packets])
        assert (direct.size, direct.packets, direct.hit_threshold) == (
            slices.size,
            len(slices.packets),
            slices.hit_threshold,
        )
        read += direct.packets
        assert direct.invalid_packets == slices.invalid_packets
    assert read == 300
    assert buffers[0].stats.as_dict() == buffers[1].stats.as_dict()


def test_sequence_ids_follow_the_first_valid_packet_of_each_sequence() -> None:
    buffer = TraceBuffer(1 << 16)
    spoofed = trace_packet_pb2.TracePacket(trusted_uid=0).SerializeToString()
    copy(buffer, seq(writer=1), Chunk(0, 1, 0, fragment(spoofed)))
    copy(buffer, seq(writer=2), Chunk(0, 1, 0, fragment(_test_event(2))))
    trusted = TrustedFieldsWriter()
    first, invalid = _trace(buffer, trusted)
    assert invalid == 1
    copy(buffer, seq(writer=1), Chunk(1, 1, 0, fragment(_test_event(1))))
    second, _ = _trace(buffer, trusted)
    # Writer 1's only packet of the first read was dropped: writer 2 was seen first.
    assert [(p.for_testing.counter, p.trusted_packet_sequence_id) for p in first.packet] == [(2, 2)]
    assert [(p.for_testing.counter, p.trusted_packet_sequence_id) for p in second.packet] == [
        (1, 3)
    ]
