"""TraceWriter and SharedMemoryArbiter in one process: bytes in the SMB and in the commits."""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from perfetto_protos.common.commit_data_request_pb2 import CommitDataRequest
from perfetto_protos.trace.trace_packet_pbzero import TracePacket
from perfetto_protos.upstream import upstream_message_class
from perfetto_smb import (
    MAX_WRITER_ID,
    BufferExhaustedPolicy,
    PageLayout,
    SharedMemory,
    SharedMemoryABI,
    SharedMemoryArbiter,
    SharedMemoryReader,
    SmbError,
    TraceWriter,
    parse_chunk_payload,
)
from perfetto_smb._fragments import read_fragment_size
from perfetto_smb._patch_list import Patch
from smb_testlib import (
    FIRST_PACKET_ON_SEQUENCE_PREFIX,
    PREVIOUS_PACKET_DROPPED_PREFIX,
    Nested,
    Reassembler,
    canonical_packet,
    expected_packet,
    fill_packet,
    split_packet,
)

Done = Callable[[], None] | None


class Harness:
    """A producer arbiter and a service-side reader over one region, committing in-process."""

    def __init__(
        self,
        size: int = 16 * 4096,
        page_size: int = 4096,
        layout: PageLayout = PageLayout.DIV1,
        *,
        auto_commit: bool = True,
        emulation: bool = False,
        stall_timeout: float = 10.0,
        may_stall: Callable[[], bool] | None = None,
    ) -> None:
        self.shm = SharedMemory.create(size)
        self.requests: list[CommitDataRequest] = []
        self.auto_commit = auto_commit
        self.service_abi = SharedMemoryABI(self.shm.buffer, page_size)
        self.reassembler = Reassembler(SharedMemoryReader(self.service_abi))
        self.registered: list[tuple[str, int]] = []
        self.delivered = 0
        buffer = bytearray(size) if emulation else self.shm.buffer
        self.arbiter = SharedMemoryArbiter(
            buffer,
            page_size,
            self.commit,
            post_task=lambda task: task(),
            emulation=emulation,
            page_layout=layout,
            stall_timeout=stall_timeout,
            register_writer=lambda w, b: self.registered.append(("+", w)),
            unregister_writer=lambda w: self.registered.append(("-", w)),
            may_stall=may_stall,
        )

    def commit(self, request: CommitDataRequest, done: Done) -> None:
        request = CommitDataRequest.FromString(request.SerializeToString())
        self.requests.append(request)
        if self.auto_commit:
            self.reassembler.commit(request)
        if done is not None:
            done()

    def deliver_pending(self) -> None:
        """Lets the service process the requests it has not seen yet."""
        while self.delivered < len(self.requests):
            self.delivered += 1
            self.reassembler.commit(self.requests[self.delivered - 1])

    def packets(self, writer: TraceWriter) -> list[bytes]:
        sequence = self.reassembler.writers[writer.writer_id]
        assert sequence.errors == []
        return sequence.packets

    def close(self) -> None:
        self.arbiter.close()
        self.service_abi.close()
        self.shm.close()


@pytest.fixture
def harness() -> Iterator[Harness]:
    h = Harness()
    yield h
    h.close()


def smb_chunk(h: Harness, page: int) -> bytes:
    begin = page * h.arbiter.abi.page_size
    return bytes(h.shm.buffer[begin : begin + h.arbiter.abi.page_size])


@pytest.mark.parametrize("page_size", [4096, 32768])
@pytest.mark.parametrize("layout", [PageLayout.DIV1, PageLayout.DIV4, PageLayout.DIV14])
def test_packets_arrive_whole_and_in_order(page_size: int, layout: PageLayout) -> None:
    h = Harness(size=8 * page_size, page_size=page_size, layout=layout)
    try:
        writer = h.arbiter.create_trace_writer(1)
        for seq in range(120):
            fill_packet(writer.new_trace_packet(), 7, seq, 3 * page_size)
        writer.flush()
        packets = [split_packet(p) for p in h.packets(writer)]
        assert [p.seq for p in packets] == list(range(120))
        for p in packets:
            assert canonical_packet(p.body) == canonical_packet(
                expected_packet(7, p.seq, 3 * page_size)
            )
            assert p.first_on_sequence == (p.seq == 0)
            assert not p.dropped_before
        assert any(r.chunks_to_patch for r in h.requests)  # nested sizes crossed chunks
        assert h.reassembler.reader.rejected == {}
    finally:
        h.close()


def test_small_packet_gets_a_one_byte_header_large_a_redundant_varint(harness: Harness) -> None:
    writer = harness.arbiter.create_trace_writer(1)
    writer.new_trace_packet().append_bytes(1, b"x" * 10)
    writer.new_trace_packet().append_bytes(1, b"y" * 200)
    writer.finish_trace_packet()
    page = smb_chunk(harness, 0)
    assert page[:4] == (0x10000000 | 1).to_bytes(4, "little")  # Div1, chunk 0 BeingWritten
    chunk_id, writer_id, packets = page[8:12], page[12:14], page[14:16]
    assert chunk_id == bytes(4)
    assert int.from_bytes(writer_id, "little") == writer.writer_id
    assert int.from_bytes(packets, "little") == 3  # 2 packets + 1 bumped ahead for scraping
    first = FIRST_PACKET_ON_SEQUENCE_PREFIX + b"\x0a\x0a" + b"x" * 10
    assert page[16 : 17 + len(first)] == bytes([len(first)]) + first
    second_at = 17 + len(first)
    second = b"\x0a\xc8\x01" + b"y" * 200
    assert page[second_at : second_at + 4] == bytes([0xCB, 0x81, 0x80, 0x00])  # 203, 4 bytes
    assert page[second_at + 4 : second_at + 4 + len(second)] == second
    scraped = harness.reassembler.reader.scrape()
    assert len(scraped) == 1
    assert not scraped[0].complete
    parsed = parse_chunk_payload(scraped[0].payload, 3, 0, complete=False)
    assert parsed.fragments == [first, second]


def test_one_byte_sizes_stop_below_127_like_upstream(harness: Harness) -> None:
    writer = harness.arbiter.create_trace_writer(1)
    writer.new_trace_packet().set_timestamp(1)  # 5 bytes with first_packet_on_sequence
    writer.new_trace_packet().append_bytes(1, b"a" * 124)  # 126 bytes: 1-byte size
    writer.write_packet(b"\x0a\x7c" + b"b" * 124)  # 126 bytes through the fast path
    writer.new_trace_packet().append_bytes(1, b"c" * 125)  # 127 bytes: 4-byte size
    writer.write_packet(b"\x0a\x7d" + b"d" * 125)  # 127 bytes through the fast path
    writer.finish_trace_packet()
    page = smb_chunk(harness, 0)
    offset = 16 + 1 + 5
    assert page[offset] == 126
    assert page[offset + 127] == 126
    offset += 2 * 127
    assert page[offset : offset + 4] == bytes([0xFF, 0x80, 0x80, 0x00])
    assert page[offset + 131 : offset + 135] == bytes([0xFF, 0x80, 0x80, 0x00])


def test_packet_count_is_bumped_before_the_packet_is_written(harness: Harness) -> None:
    writer = harness.arbiter.create_trace_writer(1)
    packet = writer.new_trace_packet()
    assert int.from_bytes(smb_chunk(harness, 0)[14:16], "little") == 1
    packet.append_varint(1, 5)
    writer.new_trace_packet()
    assert int.from_bytes(smb_chunk(harness, 0)[14:16], "little") == 2
    writer.flush()
    # The ahead-of-time bump became an empty packet when the chunk was handed over.
    (packets,) = [c for r in harness.requests for c in r.chunks_to_move]
    assert packets.page == 0


def test_chunks_hold_at_most_1022_packets(harness: Harness) -> None:
    writer = harness.arbiter.create_trace_writer(1)
    harness.auto_commit = False
    for i in range(1100):
        writer.new_trace_packet().append_varint(1, i % 100)
    writer.flush()
    counts = []
    for request in harness.requests:
        for move in request.chunks_to_move:
            begin = move.page * 4096 + 8
            counts.append(int.from_bytes(harness.shm.buffer[begin + 6 : begin + 8], "little"))
    assert counts[0] == 1023  # 1022 packets + the empty one closing the bumped count
    harness.deliver_pending()
    assert len(harness.packets(writer)) == 1100


def test_nested_size_in_a_handed_over_chunk_becomes_a_patch(harness: Harness) -> None:
    harness.auto_commit = False
    writer = harness.arbiter.create_trace_writer(3)
    packet = writer.new_trace_packet()
    outer = packet.begin_nested_message(3, Nested)
    inner = outer.begin_nested_message(2, Nested)
    inner.append_bytes(1, b"z" * 6000)  # crosses into a second chunk
    writer.flush()
    moves = [m for r in harness.requests for m in r.chunks_to_move]
    patches = [p for r in harness.requests for p in r.chunks_to_patch]
    assert [(m.page, m.chunk, m.target_buffer) for m in moves] == [(0, 0, 3), (1, 0, 3)]
    assert len(patches) == 1
    (ctp,) = patches
    assert (ctp.writer_id, ctp.chunk_id, ctp.target_buffer) == (writer.writer_id, 0, 3)
    assert not ctp.has_more_patches
    first = smb_chunk(harness, 0)
    assert first[15] & 0x10  # ChunkNeedsPatching
    assert first[15] & 0x08  # LastPacketContinuesOnNextChunk
    assert smb_chunk(harness, 1)[15] & 0x04  # FirstPacketContinuesFromPrevChunk
    # Two open nested messages had their size fields in chunk 0; both are patched.
    assert [p.offset for p in ctp.patches] == [4 + 3 + 1, 4 + 3 + 1 + 4 + 1]
    assert all(len(p.data) == 4 for p in ctp.patches)
    payload = first[16:4096]
    for p in ctp.patches:
        assert payload[p.offset : p.offset + 4] == bytes(4)  # left for the service to patch
    inner_size = 3 + 6000
    assert ctp.patches[1].data == bytes(
        [(inner_size & 0x7F) | 0x80, ((inner_size >> 7) & 0x7F) | 0x80, 0x80, 0]
    )
    harness.deliver_pending()
    (received,) = harness.packets(writer)
    assert received.endswith(b"z" * 6000)


def test_patches_split_at_1024_per_chunk_to_patch(harness: Harness) -> None:
    patch_list: collections.deque[Patch] = collections.deque()
    for chunk_id, n in ((5, 1500), (6, 3)):
        for i in range(n):
            patch = Patch(chunk_id, 4 * i)
            patch.size_field[:] = b"\x81\x80\x80\x00"
            patch_list.append(patch)
    patch_list.append(Patch(6, 100))  # not written yet: stays for a later commit
    harness.arbiter.send_patches(9, 2, patch_list)
    harness.arbiter.flush_pending_commit_data_requests()
    (request,) = harness.requests
    shape = [
        (p.writer_id, p.chunk_id, p.target_buffer, len(p.patches), p.has_more_patches)
        for p in request.chunks_to_patch
    ]
    assert shape == [(9, 5, 2, 1024, True), (9, 5, 2, 476, False), (9, 6, 2, 3, True)]
    assert len(patch_list) == 1


def test_flush_callback_and_flush_request_id(harness: Harness) -> None:
    writer = harness.arbiter.create_trace_writer(1)
    done: list[str] = []
    writer.new_trace_packet().append_varint(1, 1)
    writer.flush(lambda: done.append("a"))
    assert done == ["a"]
    assert sum(len(r.chunks_to_move) for r in harness.requests) == 1
    harness.arbiter.flush_pending_commit_data_requests(lambda: done.append("b"))
    assert done == ["a", "b"]
    assert harness.requests[-1] == CommitDataRequest()  # empty: just a fence
    harness.arbiter.notify_flush_complete(41)
    assert harness.requests[-1].flush_request_id == 41


def test_notify_flush_complete_sends_the_batch_with_its_id() -> None:
    sent: list[CommitDataRequest] = []
    with SharedMemory.create(4 * 4096) as shm:
        arbiter = SharedMemoryArbiter(shm.buffer, 4096, lambda r, d: sent.append(r))
        writer = arbiter.create_trace_writer(1)
        writer.new_trace_packet().append_bytes(1, b"n" * 5000)  # hands chunk 0 over
        assert sent == []  # batched: without post_task nothing is sent until a flush
        arbiter.notify_flush_complete(7)
        assert [(len(r.chunks_to_move), r.flush_request_id) for r in sent] == [(1, 7)]
        arbiter.close()


def test_drop_policy_marks_the_loss() -> None:
    h = Harness(size=2 * 4096, auto_commit=False)
    try:
        writer = h.arbiter.create_trace_writer(1, BufferExhaustedPolicy.DROP)
        for seq in range(40):
            fill_packet(writer.new_trace_packet(), 1, seq, 2000)
        writer.finish_trace_packet()
        assert writer.drop_count == 1
        h.deliver_pending()  # the service drains from now on
        h.auto_commit = True
        # Packets keep going to the throwaway chunk until it has been filled once.
        for seq in range(40, 120):
            fill_packet(writer.new_trace_packet(), 1, seq, 2000)
        writer.flush()
        assert writer.drop_count == 1
        received = [split_packet(p) for p in h.packets(writer)]
        seqs = [p.seq for p in received]
        assert seqs == sorted(seqs)
        assert seqs[-1] == 119
        gaps = [i for i in range(1, len(seqs)) if seqs[i] != seqs[i - 1] + 1]
        assert len(gaps) == 1
        assert [i for i, p in enumerate(received) if p.dropped_before] == gaps
        for p in received:
            assert canonical_packet(p.body) == canonical_packet(expected_packet(1, p.seq, 2000))
        sequence = h.reassembler.writers[writer.writer_id]
        assert sequence.aborted <= 1
    finally:
        h.close()


def test_drop_while_fragmenting_stamps_the_drop_size() -> None:
    h = Harness(size=2 * 4096, auto_commit=False)
    try:
        writer = h.arbiter.create_trace_writer(1, BufferExhaustedPolicy.DROP)
        packet = writer.new_trace_packet()
        packet.append_bytes(1, b"q" * 20000)  # needs 5 chunks, the SMB has 2
        writer.finish_trace_packet()
        assert writer.drop_count == 1
        second = smb_chunk(h, 1)
        assert second[15] & 0x04  # continues the packet begun in chunk 0
        assert second[16:20] == bytes([0xFF, 0xFF, 0xFF, 0x7F])  # kPacketSizeDropPacket
        h.deliver_pending()
        sequence = h.reassembler.writers[writer.writer_id]
        assert sequence.aborted == 1
        assert sequence.packets == []
        writer.new_trace_packet().append_varint(1, 5)
        writer.flush()
        h.deliver_pending()
        assert sequence.packets == [PREVIOUS_PACKET_DROPPED_PREFIX + b"\x08\x05"]
    finally:
        h.close()


def test_stall_policy_gives_up_with_a_clear_error() -> None:
    h = Harness(size=4096, auto_commit=False, stall_timeout=0.3)
    try:
        writer = h.arbiter.create_trace_writer(1)
        start = time.monotonic()
        with pytest.raises(SmbError, match="shared memory buffer full"):
            writer.new_trace_packet().append_bytes(1, b"s" * 9000)
        assert 0.3 <= time.monotonic() - start < 5
    finally:
        h.close()


def test_stall_waits_for_the_service_to_free_a_chunk() -> None:
    h = Harness(size=2 * 4096, auto_commit=False)
    try:
        writer = h.arbiter.create_trace_writer(1)

        def service() -> None:
            while not h.requests:
                time.sleep(0.01)
            time.sleep(0.2)
            h.deliver_pending()

        thread = threading.Thread(target=service)
        thread.start()
        start = time.monotonic()
        writer.new_trace_packet().append_bytes(1, b"s" * 10000)  # 3 chunks: waits for page 0
        writer.finish_trace_packet()
        assert time.monotonic() - start >= 0.2
        thread.join(timeout=30)
        writer.flush()
        h.deliver_pending()
        (packet,) = h.packets(writer)
        assert packet.endswith(b"s" * 10000)
    finally:
        h.close()


def test_stall_then_drop_drops_after_the_timeout() -> None:
    h = Harness(size=4096, auto_commit=False, stall_timeout=0.2)
    try:
        writer = h.arbiter.create_trace_writer(1, BufferExhaustedPolicy.STALL_THEN_DROP)
        writer.new_trace_packet().append_bytes(1, b"s" * 6000)
        writer.finish_trace_packet()
        assert writer.drop_count == 1
    finally:
        h.close()


def test_packets_lost_counts_every_packet_missing_from_the_sequence() -> None:
    h = Harness(size=2 * 4096, auto_commit=False)
    try:
        writer = h.arbiter.create_trace_writer(1, BufferExhaustedPolicy.DROP)
        for seq in range(40):
            fill_packet(writer.new_trace_packet(), 1, seq, 2000)
        h.deliver_pending()
        h.auto_commit = True
        for seq in range(40, 120):
            fill_packet(writer.new_trace_packet(), 1, seq, 2000)
        writer.flush()
        received = [split_packet(p).seq for p in h.packets(writer)]
        assert writer.packets_lost == 120 - len(received) > 0
    finally:
        h.close()


def test_a_packet_cut_short_by_a_full_smb_counts_as_lost() -> None:
    h = Harness(size=2 * 4096, auto_commit=False)
    try:
        writer = h.arbiter.create_trace_writer(1, BufferExhaustedPolicy.DROP)
        writer.new_trace_packet().append_bytes(1, b"q" * 20000)  # needs 5 chunks, has 2
        writer.finish_trace_packet()
        assert writer.packets_lost == 1
        h.deliver_pending()
        assert h.reassembler.writers[writer.writer_id].packets == []
    finally:
        h.close()


@pytest.mark.parametrize("stop_at_loss", [False, True])
def test_write_packets_says_where_the_loss_began(stop_at_loss: bool) -> None:
    h = Harness(size=2 * 4096, auto_commit=False)
    try:
        writer = h.arbiter.create_trace_writer(1, BufferExhaustedPolicy.DROP)
        packets = [bytes([0x08, i % 100]) + b"x" * 100 for i in range(200)]
        first_lost = writer.write_packets(packets, stop_at_loss=stop_at_loss)
        h.auto_commit = True
        h.deliver_pending()
        writer.flush()
        received = h.packets(writer)
        assert 0 < first_lost < len(packets)
        assert received[:first_lost] == [
            FIRST_PACKET_ON_SEQUENCE_PREFIX + packets[0],
            *packets[1:first_lost],
        ]
        if stop_at_loss:
            assert len(received) == first_lost
            assert writer.packets_lost == 1
        else:
            assert writer.packets_lost == len(packets) - len(received)
        more = [b"\x08\x07"] * 3  # the next call tries for a chunk again at once
        assert writer.write_packets(more, stop_at_loss=True) == 3
        writer.flush()
        assert h.packets(writer)[-3:] == [PREVIOUS_PACKET_DROPPED_PREFIX + more[0], *more[1:]]
    finally:
        h.close()


@pytest.mark.parametrize(
    "policy", [BufferExhaustedPolicy.STALL_THEN_DROP, BufferExhaustedPolicy.STALL]
)
def test_the_thread_that_drains_the_smb_never_stalls(policy: BufferExhaustedPolicy) -> None:
    h = Harness(size=4096, auto_commit=False, stall_timeout=30, may_stall=lambda: False)
    try:
        writer = h.arbiter.create_trace_writer(1, policy)
        start = time.monotonic()
        if policy is BufferExhaustedPolicy.STALL:
            with pytest.raises(SmbError, match="on the thread that drains it"):
                writer.new_trace_packet().append_bytes(1, b"s" * 6000)
        else:
            writer.new_trace_packet().append_bytes(1, b"s" * 6000)
            writer.finish_trace_packet()
            assert writer.packets_lost == 1
        assert time.monotonic() - start < 5
    finally:
        h.close()


def test_writer_ids_are_allocated_and_released(harness: Harness) -> None:
    arbiter = harness.arbiter
    first = arbiter.create_trace_writer(1)
    second = arbiter.create_trace_writer(2)
    assert (first.writer_id, second.writer_id) == (1, 2)
    first.close()
    third = arbiter.create_trace_writer(1)
    assert third.writer_id == 3  # round robin from the last id handed out
    assert harness.registered == [("+", 1), ("+", 2), ("-", 1), ("+", 3)]
    with pytest.raises(SmbError, match="target buffer"):
        arbiter.create_trace_writer(0)
    with pytest.raises(SmbError, match="closed"):
        first.new_trace_packet()
    assert not arbiter.try_shutdown()
    with pytest.raises(SmbError, match="shut down"):
        arbiter.create_trace_writer(1)


def test_writer_ids_run_out_after_32767() -> None:
    with SharedMemory.create(4096) as shm:
        arbiter = SharedMemoryArbiter(shm.buffer, 4096, lambda r, d: None)
        writers = [arbiter.create_trace_writer(1) for _ in range(MAX_WRITER_ID)]
        assert {w.writer_id for w in writers} == set(range(1, MAX_WRITER_ID + 1))
        with pytest.raises(SmbError, match="writer ids are in use"):
            arbiter.create_trace_writer(1)
        writers[99].close()
        assert arbiter.create_trace_writer(1).writer_id == 100
        arbiter.close()


def test_chunk_ids_wrap_at_two_to_the_32(harness: Harness) -> None:
    harness.auto_commit = False
    writer = harness.arbiter.create_trace_writer(1)
    writer._next_chunk_id = 0xFFFFFFFF
    writer.new_trace_packet().append_bytes(1, b"w" * 5000)
    writer.finish_trace_packet()
    assert smb_chunk(harness, 0)[8:12] == b"\xff\xff\xff\xff"
    assert smb_chunk(harness, 1)[8:12] == bytes(4)
    assert writer.next_chunk_id == 1


def test_emulation_sends_whole_chunks_and_splits_requests() -> None:
    h = Harness(size=64 * 4096, emulation=True)
    try:
        writer = h.arbiter.create_trace_writer(4)
        for seq in range(60):
            fill_packet(writer.new_trace_packet(), 2, seq, 50000)
        writer.flush()
        moves = [m for r in h.requests for m in r.chunks_to_move]
        assert all(len(m.data) == 4096 - 8 for m in moves)
        assert all(m.data[4:6] == writer.writer_id.to_bytes(2, "little") for m in moves)
        assert all(r.ByteSize() < 128 * 1024 for r in h.requests)
        assert all(h.arbiter.abi.is_page_free(p) for p in range(64))  # producer freed them
        packets = [split_packet(p) for p in h.packets(writer)]
        assert [p.seq for p in packets] == list(range(60))
        assert all(
            canonical_packet(p.body) == canonical_packet(expected_packet(2, p.seq, 50000))
            for p in packets
        )
    finally:
        h.close()


def test_threads_each_with_a_writer() -> None:
    h = Harness(size=8 * 4096, layout=PageLayout.DIV4)
    lock = threading.Lock()
    original = h.reassembler.commit

    def locked_commit(request: CommitDataRequest) -> None:
        with lock:
            original(request)

    h.reassembler.commit = locked_commit  # type: ignore[method-assign]
    try:
        writers = [h.arbiter.create_trace_writer(1) for _ in range(4)]

        def run(writer: TraceWriter, stream: int) -> None:
            for seq in range(80):
                fill_packet(writer.new_trace_packet(), stream, seq, 6000)
            writer.flush()

        threads = [threading.Thread(target=run, args=(w, i)) for i, w in enumerate(writers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        for stream, writer in enumerate(writers):
            packets = [split_packet(p) for p in h.packets(writer)]
            assert [p.seq for p in packets] == list(range(80))
            assert all(
                canonical_packet(p.body) == canonical_packet(expected_packet(stream, p.seq, 6000))
                for p in packets
            )
    finally:
        h.close()


def test_packets_are_generated_trace_packets(harness: Harness) -> None:
    class MyPacket(TracePacket):
        __slots__ = ()

    writer = harness.arbiter.create_trace_writer(1)
    packet = writer.new_trace_packet()
    assert type(packet) is TracePacket
    packet.set_timestamp(1234)
    custom = harness.arbiter.create_trace_writer(1, packet_type=MyPacket)
    assert isinstance(custom.new_trace_packet(), MyPacket)
    writer.flush()
    custom.flush()
    upstream_trace_packet = upstream_message_class("perfetto.protos.TracePacket")
    parsed: list[Any] = [upstream_trace_packet.FromString(p) for p in harness.packets(writer)]
    assert [(p.timestamp, p.first_packet_on_sequence) for p in parsed] == [(1234, True)]


def _used_chunk_bytes(h: Harness, request: CommitDataRequest) -> list[bytes]:
    """Each moved chunk's header and payload up to the end of its last counted fragment."""
    abi = h.arbiter.abi
    result = []
    for move in request.chunks_to_move:
        bitmap = abi.page_header_bitmap(move.page)
        chunk = abi.get_chunk_unchecked(move.page, bitmap, move.chunk)
        data = chunk.read()
        count = chunk.packet_count_and_flags()[0]
        offset = 8
        for _ in range(count):
            size, offset = read_fragment_size(data, offset)
            offset += size
        result.append(data[:offset])
    return result


def _write_all(
    mode: str, packets: list[bytes], layout: PageLayout
) -> tuple[list[bytes], list[bytes]]:
    h = Harness(size=64 * 4096, layout=layout, auto_commit=False)
    try:
        writer = h.arbiter.create_trace_writer(1)
        if mode == "message":
            for data in packets:
                writer.new_trace_packet().append_raw(data)
        elif mode == "write_packet":
            for data in packets:
                writer.write_packet(data)
        elif mode == "mixed":  # every way in and out of write_packet's fast path
            for i, data in enumerate(packets):
                if i % 4 == 1:
                    writer.new_trace_packet().append_raw(data)
                elif i % 4 == 2:
                    writer.write_packets([data])
                elif i % 4 == 3:
                    writer.write_packet(bytearray(data))
                else:
                    writer.write_packet(data)
        else:
            half = len(packets) // 2
            writer.write_packets(packets[:half])
            writer.write_packets(packets[half:])
        writer.flush()
        chunks = [c for r in h.requests for c in _used_chunk_bytes(h, r)]
        return chunks, [r.SerializeToString() for r in h.requests]
    finally:
        h.close()


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(
        st.one_of(st.integers(0, 8), st.integers(9, 200), st.integers(200, 9000)), max_size=400
    ),
    layout=st.sampled_from([PageLayout.DIV1, PageLayout.DIV7]),
)
# A batch whose next packet fits only through write_packet(), then one more packet.
@example(sizes=[9, 127, 286, 126, 0], layout=PageLayout.DIV7)
def test_fast_paths_write_the_same_bytes_as_messages(sizes: list[int], layout: PageLayout) -> None:
    packets = [bytes([0x0A + i % 3]) * size for i, size in enumerate([3, *sizes])]
    reference = _write_all("message", packets, layout)
    assert _write_all("write_packet", packets, layout) == reference
    assert _write_all("write_packets", packets, layout) == reference
    assert _write_all("mixed", packets, layout) == reference


def test_batches_of_tiny_packets_respect_the_1022_limit() -> None:
    packets = [b"\x08\x01"] * 3000
    reference = _write_all("message", packets, PageLayout.DIV1)
    assert _write_all("write_packets", packets, PageLayout.DIV1) == reference
    first_chunk = reference[0][0]
    assert int.from_bytes(first_chunk[6:8], "little") == 1023  # 1022 + the closing empty one


def test_batches_with_a_packet_bigger_than_any_chunk() -> None:
    packets = [b"\x08\x01" * 10, b"\x0a" * 70000, b"\x08\x02" * 30]
    reference = _write_all("message", packets, PageLayout.DIV1)
    assert _write_all("write_packets", packets, PageLayout.DIV1) == reference


def test_emulation_scrape_sends_unfinished_chunks_without_freeing(harness: Harness) -> None:
    h = Harness(size=4 * 4096, emulation=True, auto_commit=False)
    try:
        writer = h.arbiter.create_trace_writer(6)
        writer.new_trace_packet().set_timestamp(1)
        writer.new_trace_packet().set_timestamp(2)
        writer.finish_trace_packet()
        other = h.arbiter.create_trace_writer(6)
        other.new_trace_packet().set_timestamp(3)
        other.finish_trace_packet()
        h.arbiter.scrape_emulated_shared_memory_buffer({writer.writer_id: 9})
        (request,) = h.requests
        (move,) = request.chunks_to_move
        assert (move.page, move.chunk, move.target_buffer) == (0, 0, 9)
        assert move.chunk_incomplete
        assert len(move.data) == 4096 - 8
        chunk = h.reassembler.reader.chunk_from_bytes(move.chunk, move.data, complete=False)
        assert chunk is not None
        assert chunk.packet_count == 3  # two packets + the bump for the next one
        parsed = parse_chunk_payload(chunk.payload, chunk.packet_count, chunk.flags, complete=False)
        assert len(parsed.fragments) == 2
        assert not h.arbiter.abi.is_page_free(0)  # nothing freed
        with pytest.raises(SmbError, match="emulation"):
            harness.arbiter.scrape_emulated_shared_memory_buffer({})
    finally:
        h.close()
