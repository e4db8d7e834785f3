"""TraceBuffer: writing, re-commits, patches, overwrite/discard, reading, stats."""

from __future__ import annotations

from pathlib import Path

import pytest
from perfetto_service import ServiceError
from perfetto_service.core._trace_buffer import BufferStats, OverwritePolicy, Patch, TraceBuffer
from service_testlib import (
    FIRST,
    LAST,
    PATCH,
    Chunk,
    ChunkPacker,
    copy,
    fragment,
    read_all,
    seq,
)


def _packets(buffer: TraceBuffer) -> list[bytes]:
    return [data for _, data, _ in read_all(buffer)]


def test_rejects_sizes_that_are_not_multiples_of_the_record_alignment() -> None:
    with pytest.raises(ServiceError):
        TraceBuffer(100)
    with pytest.raises(ServiceError):
        TraceBuffer(0)


def test_packets_come_back_in_order_with_their_sequence_and_first_one_marked_dropped() -> None:
    buffer = TraceBuffer(4096)
    s = seq(producer=3, writer=7, uid=1001, pid=99)
    copy(buffer, s, Chunk(0, 2, 0, fragment(b"\x08\x01") + fragment(b"\x08\x02")))
    copy(buffer, s, Chunk(1, 1, 0, fragment(b"\x08\x03")))
    read = read_all(buffer)
    assert [data for _, data, _ in read] == [b"\x08\x01", b"\x08\x02", b"\x08\x03"]
    assert {props for props, _, _ in read} == {s}
    # V1 marks the first packet ever read on a sequence as following a loss.
    assert [dropped for _, _, dropped in read] == [1, 0, 0]
    assert buffer.stats.chunks_read == 2
    assert read_all(buffer) == []


def test_sequences_are_read_in_producer_then_writer_order() -> None:
    buffer = TraceBuffer(4096)
    for producer, writer in [(2, 1), (1, 5), (1, 2)]:
        copy(buffer, seq(producer, writer), Chunk(0, 1, 0, fragment(bytes([producer, writer]))))
    assert _packets(buffer) == [b"\x01\x02", b"\x01\x05", b"\x02\x01"]


def test_fragmented_packet_is_returned_only_once_all_its_chunks_are_here() -> None:
    packer = ChunkPacker(payload_size=64)
    big = bytes(range(150))
    packer.add(b"\x08\x01")
    packer.add(big)
    packer.add(b"\x08\x02")
    chunks = packer.flush()
    assert len(chunks) == 3
    buffer = TraceBuffer(4096)
    s = seq()
    copy(buffer, s, chunks[0])
    copy(buffer, s, chunks[1])
    assert _packets(buffer) == [b"\x08\x01"]
    assert buffer.stats.readaheads_failed == 1
    copy(buffer, s, chunks[2])
    read = read_all(buffer)
    assert [data for _, data, _ in read] == [big, b"\x08\x02"]
    assert [dropped for _, _, dropped in read] == [0, 0]
    assert buffer.stats.readaheads_succeeded == 1


def test_out_of_order_commits_are_read_in_chunk_id_order() -> None:
    buffer = TraceBuffer(4096)
    s = seq()
    copy(buffer, s, Chunk(1, 1, 0, fragment(b"\x08\x02")))
    copy(buffer, s, Chunk(0, 1, 0, fragment(b"\x08\x01")))
    assert buffer.stats.chunks_committed_out_of_order == 1
    assert _packets(buffer) == [b"\x08\x01", b"\x08\x02"]


def test_reading_stops_at_a_gap_and_resumes_when_it_is_filled() -> None:
    buffer = TraceBuffer(4096)
    s = seq()
    copy(buffer, s, Chunk(0, 1, 0, fragment(b"A")))
    copy(buffer, s, Chunk(2, 1, 0, fragment(b"C")))
    assert _packets(buffer) == [b"A"]
    copy(buffer, s, Chunk(1, 1, 0, fragment(b"B")))
    assert _packets(buffer) == [b"B", b"C"]


def test_orphan_continuation_is_skipped_and_the_next_packet_marked_dropped() -> None:
    buffer = TraceBuffer(4096)
    s = seq()
    copy(buffer, s, Chunk(5, 2, FIRST, fragment(b"tail") + fragment(b"whole")))
    assert read_all(buffer) == [(s, b"whole", 1)]


def test_chunk_ids_wrap_around() -> None:
    buffer = TraceBuffer(4096)
    s = seq()
    for chunk_id, data in [(0xFFFFFFFE, b"A"), (0xFFFFFFFF, b"B"), (0, b"C"), (1, b"D")]:
        copy(buffer, s, Chunk(chunk_id, 1, 0, fragment(data)))
    assert _packets(buffer) == [b"A", b"B", b"C", b"D"]
    # Like upstream, a new sequence's last written id starts at 0, so ids more than 2**31
    # ahead of it count as out of order.
    assert buffer.stats.chunks_committed_out_of_order == 2


def test_incomplete_chunk_hides_its_last_fragment_until_recommitted_complete() -> None:
    buffer = TraceBuffer(4096)
    s = seq()
    payload = fragment(b"one") + fragment(b"two") + fragment(b"thr") + bytes(20)
    copy(buffer, s, Chunk(0, 3, 0, payload), chunk_complete=False)
    copy(buffer, s, Chunk(1, 1, 0, fragment(b"next") + bytes(29)))
    assert _packets(buffer) == [b"one", b"two"]
    copy(buffer, s, Chunk(0, 3, 0, payload), chunk_complete=True)
    assert buffer.stats.chunks_rewritten == 1
    assert _packets(buffer) == [b"thr", b"next"]


@pytest.mark.parametrize(
    ("num_fragments", "flags", "payload_size"),
    [(1, 0, 30), (2, 0, 60), (3, 0, 30)],
    ids=["fewer-fragments", "different-size", "removed-flag"],
)
def test_recommit_that_changes_size_shrinks_or_drops_flags_is_an_abi_violation(
    num_fragments: int, flags: int, payload_size: int
) -> None:
    buffer = TraceBuffer(4096)
    s = seq()
    copy(buffer, s, Chunk(0, 3, LAST, bytes(30)), chunk_complete=True)
    if num_fragments == 3:
        flags = 0
    copy(buffer, s, Chunk(0, num_fragments, flags, bytes(payload_size)), chunk_complete=True)
    assert buffer.stats.abi_violations == 1
    assert buffer.stats.chunks_rewritten == 0


def test_chunk_waiting_for_patches_is_not_read_until_patched() -> None:
    buffer = TraceBuffer(4096)
    s = seq()
    packer = ChunkPacker(payload_size=48)
    packer.add(b"\x0a" + bytes(100))
    first, second, third = packer.flush()
    copy(buffer, s, Chunk(first.chunk_id, first.num_fragments, first.flags | PATCH, first.payload))
    copy(buffer, s, second)
    copy(buffer, s, third)
    assert _packets(buffer) == []
    # Patch 4 bytes of the first fragment's body (offset 4 = after its size header).
    assert buffer.try_patch_chunk_contents(1, 1, 0, [Patch(4, b"\x0b\x0c\x0d\x0e")], True)
    assert _packets(buffer) == []
    assert buffer.try_patch_chunk_contents(1, 1, 0, [], False)
    (packet,) = _packets(buffer)
    assert packet[:4] == b"\x0b\x0c\x0d\x0e"
    assert len(packet) == 101
    assert buffer.stats.patches_succeeded == 1


@pytest.mark.parametrize(
    "patch",
    [Patch(45, b"abcd"), Patch(-1, b"abcd"), Patch(0, b"abc"), Patch(0, b"abcde")],
    ids=["past-end", "negative", "short", "long"],
)
def test_bad_patches_fail_and_are_counted(patch: Patch) -> None:
    buffer = TraceBuffer(4096)
    copy(buffer, seq(), Chunk(0, 1, PATCH, fragment(b"x" * 44)))
    assert not buffer.try_patch_chunk_contents(1, 1, 0, [patch], False)
    assert buffer.stats.patches_failed == 1
    assert not buffer.try_patch_chunk_contents(1, 1, 9, [Patch(0, b"abcd")], False)
    assert not buffer.try_patch_chunk_contents(2, 1, 0, [Patch(0, b"abcd")], False)
    assert buffer.stats.patches_failed == 3
    assert _packets(buffer) == []


def test_ring_buffer_overwrites_oldest_chunks_and_marks_the_loss() -> None:
    buffer = TraceBuffer(1024)
    s = seq()
    # Each record is 16 + 112 = 128 bytes: 8 fit in the buffer.
    for chunk_id in range(12):
        copy(buffer, s, Chunk(chunk_id, 1, 0, fragment(bytes([chunk_id]) * 100) + bytes(8)))
    read = read_all(buffer)
    assert [data[0] for _, data, _ in read] == list(range(4, 12))
    assert read[0][2] == 1
    stats = buffer.stats
    assert stats.chunks_written == 12
    assert stats.chunks_overwritten == 4
    assert stats.bytes_overwritten == 4 * 128
    assert stats.write_wrap_count == 1
    assert stats.chunks_discarded == 0


def test_a_clone_keeps_writing_and_reading_its_sequences_on_its_own() -> None:
    source = TraceBuffer(1024)
    a, b = seq(writer=1), seq(writer=2)
    # 128-byte records: 8 fit. Chunks 0-3 of each writer, interleaved, fill the buffer.
    for chunk_id in range(4):
        for s in (a, b):
            payload = fragment(bytes([s.writer_id, chunk_id]) * 50) + bytes(8)
            copy(source, s, Chunk(chunk_id, 1, 0, payload))
    clone = source.clone()
    # The clone overwrites its oldest chunks (0 and 1 of writer 1, 0 of writer 2).
    for chunk_id in (4, 5):
        copy(clone, a, Chunk(chunk_id, 1, 0, fragment(bytes([1, chunk_id]) * 50) + bytes(8)))
    copy(clone, b, Chunk(4, 1, 0, fragment(bytes([2, 4]) * 50) + bytes(8)))
    cloned = [(data[0], data[1], dropped) for _, data, dropped in read_all(clone)]
    assert cloned == [(1, c, int(c == 2)) for c in range(2, 6)] + [
        (2, c, int(c == 1)) for c in range(1, 5)
    ]
    assert clone.stats.chunks_overwritten == 3
    assert clone.stats.chunks_written == 11
    read = [(data[0], data[1]) for _, data, _ in read_all(source)]
    assert read == [(w, c) for w in (1, 2) for c in range(4)]
    assert source.stats.chunks_written == 8
    assert source.stats.chunks_overwritten == 0


def test_ring_buffer_wraps_with_padding_when_a_record_does_not_fit_at_the_end() -> None:
    buffer = TraceBuffer(1024)
    s = seq()
    for chunk_id in range(7):
        copy(buffer, s, Chunk(chunk_id, 1, 0, fragment(bytes([chunk_id]) * 140)))
    # Records are 160 bytes: the 7th does not fit in the last 64, which become padding.
    stats = buffer.stats
    assert stats.padding_bytes_written == 64
    assert stats.write_wrap_count == 1
    assert stats.chunks_overwritten == 1
    assert [data[0] for data in _packets(buffer)] == [1, 2, 3, 4, 5, 6]


def test_discard_drops_the_first_write_that_would_clobber_unread_data_and_all_later() -> None:
    buffer = TraceBuffer(1024, OverwritePolicy.DISCARD)
    s = seq()
    for chunk_id in range(10):
        copy(buffer, s, Chunk(chunk_id, 1, 0, fragment(bytes([chunk_id]) * 100) + bytes(8)))
    assert [data[0] for data in _packets(buffer)] == list(range(8))
    assert buffer.stats.chunks_discarded == 2
    # Even once everything was read, writes stay discarded.
    copy(buffer, s, Chunk(10, 1, 0, fragment(b"late") + bytes(104)))
    assert _packets(buffer) == []
    assert buffer.stats.chunks_discarded == 3
    assert buffer.stats.chunks_overwritten == 0


def test_discard_allows_overwriting_data_already_read() -> None:
    buffer = TraceBuffer(1024, OverwritePolicy.DISCARD)
    s = seq()
    for chunk_id in range(8):
        copy(buffer, s, Chunk(chunk_id, 1, 0, fragment(bytes([chunk_id]) * 100) + bytes(8)))
    assert len(_packets(buffer)) == 8
    for chunk_id in range(8, 12):
        copy(buffer, s, Chunk(chunk_id, 1, 0, fragment(bytes([chunk_id]) * 100) + bytes(8)))
    assert [data[0] for data in _packets(buffer)] == [8, 9, 10, 11]
    assert buffer.stats.chunks_discarded == 0


def test_drop_packet_sentinel_counts_writer_packet_loss_not_abi_violation() -> None:
    buffer = TraceBuffer(4096)
    s = seq()
    copy(buffer, s, Chunk(0, 2, LAST, fragment(b"A") + fragment(b"partial")))
    copy(buffer, s, Chunk(1, 1, FIRST, b"\xff\xff\xff\x7f" + bytes(12)))
    copy(buffer, s, Chunk(2, 1, 0, fragment(b"B")))
    read = read_all(buffer)
    assert [data for _, data, _ in read] == [b"A", b"B"]
    assert read[1][2] == 1
    assert buffer.stats.trace_writer_packet_loss == 1
    assert buffer.stats.abi_violations == 0


def test_a_chunk_opening_with_previous_packet_dropped_counts_writer_packet_loss() -> None:
    # What a TraceWriter writes first into the first packet after it dropped some: f42 = 257.
    after_loss = b"\xd0\x02\x81\x02\x08\x05"
    buffer = TraceBuffer(4096)
    s = seq()
    copy(buffer, s, Chunk(0, 1, 0, fragment(b"\x08\x01")))
    copy(buffer, s, Chunk(1, 2, 0, fragment(after_loss) + fragment(after_loss)))
    copy(buffer, s, Chunk(2, 1, FIRST, fragment(after_loss)))  # a continuation: no packet start
    copy(buffer, s, Chunk(3, 1, 0, fragment(b"\xd0\x02\x00")))  # previous_packet_dropped = 0
    assert buffer.stats.trace_writer_packet_loss == 1
    # A scraped chunk whose only packet was still being written counts once it is complete.
    copy(buffer, s, Chunk(4, 1, 0, fragment(after_loss)), chunk_complete=False)
    assert buffer.stats.trace_writer_packet_loss == 1
    copy(buffer, s, Chunk(4, 1, 0, fragment(after_loss)), chunk_complete=True)
    copy(buffer, s, Chunk(4, 1, 0, fragment(after_loss)), chunk_complete=True)
    assert buffer.stats.trace_writer_packet_loss == 2
    assert buffer.stats.abi_violations == 0


def test_chunk_larger_than_a_record_can_hold_is_rejected() -> None:
    buffer = TraceBuffer(1 << 20)
    copy(buffer, seq(), Chunk(0, 1, 0, fragment(bytes(65520))))
    assert buffer.stats.abi_violations == 1
    assert buffer.stats.chunks_written == 0


@pytest.mark.parametrize(
    "payload",
    [
        b"\x85\x80\x80\x80\x80" + bytes(11),  # size varint longer than 4 bytes
        fragment(b"x" * 4) + b"\x20" + bytes(3),  # second fragment overruns the chunk
        fragment(b"x" * 7) + b"\x80\x80\x80\x80\x80",  # size varint runs to the record end
    ],
    ids=["long-varint", "overrun", "truncated"],
)
def test_fragments_that_lie_about_their_size_are_abi_violations(payload: bytes) -> None:
    buffer = TraceBuffer(4096)
    s = seq()
    copy(buffer, s, Chunk(0, 2, 0, payload))
    copy(buffer, s, Chunk(1, 1, 0, fragment(b"ok")))
    read = read_all(buffer)
    assert read[-1] == (s, b"ok", 1)
    assert buffer.stats.abi_violations == 1


def test_more_fragments_claimed_than_present_reads_the_zero_padding_as_empty() -> None:
    buffer = TraceBuffer(4096)
    copy(buffer, seq(), Chunk(0, 20, 0, fragment(b"real")))
    assert _packets(buffer) == [b"real"]
    assert buffer.stats.abi_violations == 1


def test_out_of_range_header_values_are_counted_not_raised() -> None:
    buffer = TraceBuffer(4096)
    buffer.copy_chunk_untrusted(seq(), -1, 1, 0, fragment(b"a"))
    buffer.copy_chunk_untrusted(seq(), 1 << 32, 1, 0, fragment(b"a"))
    buffer.copy_chunk_untrusted(seq(), 0, 1 << 16, 0, fragment(b"a"))
    buffer.copy_chunk_untrusted(seq(), 0, 1, 256, fragment(b"a"))
    buffer.copy_chunk_untrusted(seq(writer=1 << 16), 0, 1, 0, fragment(b"a"))
    buffer.copy_chunk_untrusted(seq(), 1 << 70, 1, 0, fragment(b"a"))
    assert buffer.stats.abi_violations == 6
    assert _packets(buffer) == []


def test_a_write_ends_the_read_pass() -> None:
    buffer = TraceBuffer(4096)
    s = seq()
    copy(buffer, s, Chunk(0, 2, 0, fragment(b"A") + fragment(b"B")))
    buffer.begin_read()
    first = buffer.read_next_trace_packet()
    assert first is not None
    copy(buffer, s, Chunk(1, 1, 0, fragment(b"C")))
    assert buffer.read_next_trace_packet() is None
    assert _packets(buffer) == [b"B", b"C"]


def test_stats_serialize_to_the_buffer_stats_message() -> None:
    buffer = TraceBuffer(4096)
    copy(buffer, seq(), Chunk(0, 1, 0, fragment(b"A")))
    read_all(buffer)
    proto = buffer.stats.to_proto()
    assert proto.buffer_size == 4096
    assert proto.chunks_written == 1
    assert proto.bytes_read == 32
    parsed = type(proto).FromString(buffer.stats.serialize())
    assert parsed == proto
    assert BufferStats().as_dict()["abi_violations"] == 0


def test_writer_stats_histogram_counts_the_payload_used_by_each_chunk_read() -> None:
    buffer = TraceBuffer(4096)
    copy(buffer, seq(writer=1), Chunk(0, 1, 0, fragment(b"x" * 10) + bytes(50)))
    copy(buffer, seq(writer=1), Chunk(1, 2, 0, fragment(b"y" * 100) + fragment(b"z" * 100)))
    copy(buffer, seq(writer=2), Chunk(0, 1, 0, fragment(b"w" * 3)))
    read_all(buffer)
    assert set(buffer.writer_stats) == {(1, 1), (1, 2)}
    first = buffer.writer_stats[(1, 1)]
    # 14 bytes used falls in (8, 32]; 208 bytes in (128, 512].
    assert first.counts == [0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0]
    assert first.sums == [0, 14, 0, 208, 0, 0, 0, 0, 0, 0, 0]
    assert buffer.writer_stats[(1, 2)].counts[0] == 1


def test_a_reader_overtaken_by_the_writer_resumes_at_the_oldest_chunk_left() -> None:
    buffer = TraceBuffer(1024)
    s = seq()
    # 128-byte records: 8 fit. Each chunk holds two packets.
    for chunk_id in range(8):
        payload = fragment(bytes([chunk_id, 0]) * 25) + fragment(bytes([chunk_id, 1]) * 25)
        copy(buffer, s, Chunk(chunk_id, 2, 0, payload + bytes(4)))
    buffer.begin_read()
    first = buffer.read_next_trace_packet()
    assert first is not None
    assert bytes(first.data[:2]) == b"\x00\x00"
    # The writer laps the reader: chunks 0-2 are overwritten, chunk 0 half read.
    for chunk_id in range(8, 11):
        payload = fragment(bytes([chunk_id, 0]) * 25) + fragment(bytes([chunk_id, 1]) * 25)
        copy(buffer, s, Chunk(chunk_id, 2, 0, payload + bytes(4)))
    read = read_all(buffer)
    assert [(data[0], data[1]) for _, data, _ in read] == [
        (chunk_id, half) for chunk_id in range(3, 11) for half in (0, 1)
    ]
    assert read[0][2] == 1
    assert buffer.stats.chunks_overwritten == 3


def test_payload_may_be_any_bytes_like_object_sized_in_bytes() -> None:
    payload = fragment(b"\x08\x07") + bytes(2)  # 8 bytes
    words = memoryview(bytearray(payload)).cast("I")  # 2 items, 8 bytes
    buffer = TraceBuffer(4096)
    buffer.copy_chunk_untrusted(seq(writer=1), 0, 1, 0, words)
    buffer.copy_chunk_untrusted(seq(writer=2), 0, 1, 0, bytearray(payload))
    buffer.copy_chunk_untrusted(seq(writer=3), 0, 1, 0, memoryview(payload))
    assert _packets(buffer) == [b"\x08\x07"] * 3
    assert buffer.stats.bytes_written == 3 * 32
    assert buffer.size == 4096


def _rss_anon() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no RssAnon in /proc/self/status")


def test_a_short_session_commits_few_pages_of_its_buffer() -> None:
    buffer = TraceBuffer(32 << 20)
    s = seq()
    chunk = Chunk(0, 1, 0, fragment(b"\x08\x01" * 100))
    before = _rss_anon()
    copy(buffer, s, chunk)
    grown = _rss_anon() - before
    # The first commit takes 64 KiB of the buffer (it used to take 1 MiB).
    assert grown < 512 << 10, f"{grown >> 10} KiB resident after one chunk"
    assert _packets(buffer) == [b"\x08\x01" * 100]
