"""The service-side reader against whatever a hostile producer can put in its SMB."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from perfetto_smb import (
    PACKET_SIZE_DROP_PACKET,
    ChunkFlags,
    PageLayout,
    SharedMemoryABI,
    SharedMemoryReader,
    apply_patch,
    parse_chunk_payload,
)
from perfetto_smb._abi import pack_chunk_header
from perfetto_smb._fragments import read_fragment_size

PAGE = 4096
PAGES = 4


def make_reader(data: bytes = b"") -> tuple[bytearray, SharedMemoryABI, SharedMemoryReader]:
    buf = bytearray(PAGE * PAGES)
    buf[: len(data)] = data[: len(buf)]
    abi = SharedMemoryABI(buf, PAGE)
    return buf, abi, SharedMemoryReader(abi)


def complete_chunk(
    abi: SharedMemoryABI, page: int, idx: int, header: bytes, payload: bytes
) -> None:
    if abi.is_page_free(page):
        abi.try_partition_page(page, PageLayout.DIV4 if idx < 4 else PageLayout.DIV7)
    chunk = abi.try_acquire_chunk_for_writing(page, idx, chunk_id=0, writer_id=1)
    assert chunk is not None
    abi.buffer[chunk.begin : chunk.begin + 8] = header
    abi.buffer[chunk.payload_begin : chunk.payload_begin + len(payload)] = payload
    abi.release_chunk_as_complete(chunk)


def test_each_rejection_has_its_reason() -> None:
    _, abi, reader = make_reader()
    try:
        abi.try_partition_page(0, PageLayout.DIV4)
        assert reader.read_chunk(PAGES, 0) is None
        assert reader.read_chunk(-1, 0) is None
        assert reader.read_chunk(0, 4) is None  # Div4 has chunks 0..3
        assert reader.read_chunk(1, 0) is None  # unpartitioned page
        assert reader.read_chunk(0, 0) is None  # Free, not Complete
        complete_chunk(abi, 0, 1, pack_chunk_header(5, 0, 1, 0), b"")
        assert reader.read_chunk(0, 1) is None  # writer id 0
        complete_chunk(abi, 0, 2, pack_chunk_header(5, 40000, 1, 0), b"")
        assert reader.read_chunk(0, 2) is None  # writer id above 32767
        assert reader.rejected == {
            "page_out_of_range": 2,
            "chunk_out_of_range": 2,
            "chunk_not_complete": 1,
            "invalid_writer_id": 2,
        }
        assert abi.is_page_free(0)  # rejected chunks were still freed
        assert reader.chunk_from_bytes(0, b"1234567") is None
        assert reader.chunk_from_bytes(0, bytes(70000)) is None
        assert reader.rejected["bad_chunk_size"] == 2
        assert reader.chunks_read == 0
    finally:
        abi.close()


def test_reads_copy_then_free() -> None:
    _, abi, reader = make_reader()
    try:
        complete_chunk(abi, 2, 6, pack_chunk_header(9, 3, 2, 0), b"\x02ab\x01c")
        got = reader.read_chunk(2, 6)
        assert got is not None
        assert (got.writer_id, got.chunk_id, got.packet_count, got.flags) == (3, 9, 2, 0)
        assert got.payload[:5] == b"\x02ab\x01c"
        assert len(got.payload) == 584 - 8
        assert abi.is_page_free(2)
        assert reader.read_chunk(2, 6) is None  # already consumed
        parsed = parse_chunk_payload(got.payload, got.packet_count, got.flags)
        assert parsed.fragments == [b"ab", b"c"]
    finally:
        abi.close()


def test_open_chunk_reads_in_place_until_closed() -> None:
    _, abi, reader = make_reader()
    try:
        complete_chunk(abi, 2, 6, pack_chunk_header(9, 3, 2, 0), b"\x02ab\x01c")
        opened = reader.open_chunk(2, 6)
        assert opened is not None
        writer_id, chunk_id, count, flags, payload = opened
        assert (writer_id, chunk_id, count, flags) == (3, 9, 2, 0)
        assert bytes(payload[:5]) == b"\x02ab\x01c"
        assert len(payload) == 584 - 8
        assert not abi.is_page_free(2)  # BeingRead until closed
        assert reader.close_chunk()
        assert abi.is_page_free(2)
        assert reader.chunks_read == 1
        with pytest.raises(ValueError, match="released"):  # the view ends with the read
            bytes(payload)
        assert reader.open_chunk(2, 6) is None  # already consumed
    finally:
        abi.close()


def test_close_chunk_rejects_a_page_changed_while_open() -> None:
    _, abi, reader = make_reader()
    try:
        complete_chunk(abi, 0, 1, pack_chunk_header(1, 3, 1, 0), b"\x01a")
        assert reader.open_chunk(0, 1) is not None
        abi.words[0] = 0  # the producer unpartitions the page under the reader
        assert not reader.close_chunk()
        assert reader.rejected == {"chunk_changed_while_read": 1}
        assert reader.chunks_read == 0
    finally:
        abi.close()


def test_scrape_copies_without_freeing() -> None:
    _, abi, reader = make_reader()
    try:
        abi.try_partition_page(0, PageLayout.DIV2)
        writing = abi.try_acquire_chunk_for_writing(0, 0, chunk_id=4, writer_id=7, packet_count=2)
        assert writing is not None
        abi.buffer[writing.payload_begin : writing.payload_begin + 5] = b"\x02hi\x05x"
        single = abi.try_acquire_chunk_for_writing(0, 1, chunk_id=5, writer_id=7, packet_count=1)
        assert single is not None
        scraped = reader.scrape()
        assert [(c.chunk_id, c.complete) for c in scraped] == [(4, False)]  # count < 2 skipped
        parsed = parse_chunk_payload(scraped[0].payload, 2, 0, complete=False)
        assert parsed.fragments == [b"hi"]  # the unfinished last fragment is ignored
        assert reader.scrape(writer_ids={8}) == []
        abi.release_chunk_as_complete(single)
        assert [(c.chunk_id, c.complete) for c in reader.scrape(writer_ids={7})] == [
            (4, False),
            (5, True),
        ]
        assert abi.page_header_bitmap(0) == 0x20000000 | (3 << 2) | 1  # nothing freed
    finally:
        abi.close()


def test_fragment_parsing_edge_cases() -> None:
    assert read_fragment_size(b"\x80\x80\x80\x80\x01", 0) == (-1, 4)  # 5-byte varint
    assert read_fragment_size(b"\x80\x80", 0) == (-1, 2)  # truncated
    assert read_fragment_size(b"\x85\x80\x80\x00", 0) == (5, 4)  # redundant 4-byte
    drop = struct.pack("<I", 0x7FFFFFFF)
    parsed = parse_chunk_payload(b"\x01a" + drop, 2, ChunkFlags.LAST_PACKET_CONTINUES_ON_NEXT_CHUNK)
    assert parsed.fragments == [b"a"]
    assert parsed.writer_aborted
    assert not parsed.last_continues
    assert read_fragment_size(drop, 0) == (PACKET_SIZE_DROP_PACKET, 4)
    parsed = parse_chunk_payload(b"\x05ab", 1, 0)
    assert parsed.fragments == []
    assert parsed.error is not None
    assert "past the payload end" in parsed.error
    parsed = parse_chunk_payload(b"\x01a", 3, 0)
    assert parsed.fragments == [b"a"]
    assert parsed.error is not None
    parsed = parse_chunk_payload(b"\x00\x01z", 2, ChunkFlags.FIRST_PACKET_CONTINUES_FROM_PREV_CHUNK)
    assert parsed.fragments == [b"", b"z"]
    assert parsed.first_continues


def test_patch_validation() -> None:
    payload = bytearray(16)
    assert apply_patch(payload, 12, b"\x81\x80\x80\x00")
    assert payload[12:] == b"\x81\x80\x80\x00"
    assert not apply_patch(payload, 13, b"abcd")  # would run past the end
    assert not apply_patch(payload, -1, b"abcd")
    assert not apply_patch(payload, 0, b"abc")  # not exactly 4 bytes
    assert not apply_patch(payload, 0, b"abcde")
    assert payload[:12] == bytes(12)


def test_negative_chunk_index_on_a_partitioned_page_is_rejected() -> None:
    buf, abi, reader = make_reader()
    try:
        buf[0:4] = struct.pack("<I", 0xFFFF_FFFF)  # Div14, every chunk Complete
        assert reader.read_chunk(0, -1) is None
        assert reader.rejected["chunk_out_of_range"] == 1
    finally:
        abi.close()


@settings(max_examples=200, deadline=None)
@given(
    smb=st.binary(min_size=0, max_size=PAGE * PAGES),
    bitmaps=st.lists(st.integers(0, 2**32 - 1), min_size=PAGES, max_size=PAGES),
    requests=st.lists(st.tuples(st.integers(-3, 2**32), st.integers(-3, 40)), max_size=30),
)
def test_hostile_smb_never_breaks_the_reader(
    smb: bytes, bitmaps: list[int], requests: list[tuple[int, int]]
) -> None:
    buf, abi, reader = make_reader(smb)
    try:
        for page, bitmap in enumerate(bitmaps):
            buf[page * PAGE : page * PAGE + 4] = struct.pack("<I", bitmap)
        for page, chunk in requests:
            got = reader.read_chunk(page, chunk)
            if got is not None:
                assert 0 <= got.packet_count <= 1023
                assert len(got.payload) <= PAGE - 16
                parsed = parse_chunk_payload(got.payload, got.packet_count, got.flags)
                assert sum(len(f) for f in parsed.fragments) <= len(got.payload)
        assert reader.chunks_read + sum(reader.rejected.values()) == len(requests)
        for copied in reader.scrape():
            assert 1 <= copied.writer_id <= 32767
            parse_chunk_payload(copied.payload, copied.packet_count, copied.flags, complete=False)
    finally:
        abi.close()


@settings(max_examples=300, deadline=None)
@given(
    payload=st.binary(max_size=600),
    count=st.integers(0, 1023),
    flags=st.integers(0, 63),
    complete=st.booleans(),
)
def test_any_payload_parses_or_says_why(
    payload: bytes, count: int, flags: int, complete: bool
) -> None:
    parsed = parse_chunk_payload(payload, count, flags, complete=complete)
    assert len(parsed.fragments) <= count
    assert sum(len(f) for f in parsed.fragments) <= len(payload)
    for fragment in parsed.fragments:
        assert fragment in payload
    if parsed.error is None and not parsed.writer_aborted:
        assert len(parsed.fragments) == max(count - (0 if complete else 1), 0)


@settings(max_examples=200, deadline=None)
@given(
    offset=st.integers(-10, 5000),
    data=st.binary(max_size=8),
    size=st.integers(0, 4088),
)
def test_any_patch_stays_inside_the_payload(offset: int, data: bytes, size: int) -> None:
    payload = bytearray(size)
    applied = apply_patch(payload, offset, data)
    assert len(payload) == size
    assert applied == (len(data) == 4 and 0 <= offset <= size - 4)
