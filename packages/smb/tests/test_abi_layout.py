"""Byte-level layout of the SMB (docs/protocol.md, "The shared memory buffer")."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from perfetto_smb import ChunkFlags, ChunkState, PageLayout, SharedMemory, SharedMemoryABI, SmbError
from perfetto_smb._abi import (
    chunk_size_for_layout,
    chunk_state_from_bitmap,
    pack_chunk_header,
    unpack_chunk_header,
    used_chunks_from_bitmap,
)
from protozero import write_redundant_varint

ABI_PAGE_SIZES = [4096 * n for n in range(1, 17)]

# Upstream's table: page size -> chunk size for Div1, Div2, Div4, Div7, Div14.
CHUNK_SIZE_TABLE = {
    4096: (4088, 2044, 1020, 584, 292),
    8192: (8184, 4092, 2044, 1168, 584),
    16384: (16376, 8188, 4092, 2336, 1168),
    32768: (32760, 16380, 8188, 4680, 2340),
    65536: (65528, 32764, 16380, 9360, 4680),
}
LAYOUTS = [PageLayout.DIV1, PageLayout.DIV2, PageLayout.DIV4, PageLayout.DIV7, PageLayout.DIV14]
CHUNKS = {
    PageLayout.DIV1: 1,
    PageLayout.DIV2: 2,
    PageLayout.DIV4: 4,
    PageLayout.DIV7: 7,
    PageLayout.DIV14: 14,
}


@pytest.fixture
def region() -> Iterator[SharedMemory]:
    with SharedMemory.create(4 * 65536) as shm:
        yield shm


def word(shm: SharedMemory, offset: int) -> int:
    return int.from_bytes(shm.buffer[offset : offset + 4], "little")


@pytest.mark.parametrize("page_size", sorted(CHUNK_SIZE_TABLE))
def test_chunk_sizes_match_the_abi_table(page_size: int) -> None:
    got = tuple(chunk_size_for_layout(page_size, layout) for layout in LAYOUTS)
    assert got == CHUNK_SIZE_TABLE[page_size]


@pytest.mark.parametrize("page_size", ABI_PAGE_SIZES)
def test_every_page_size_and_layout_tiles_the_page(page_size: int) -> None:
    region = SharedMemory.create(2 * page_size)
    abi = SharedMemoryABI(region.buffer, page_size)
    try:
        for layout in LAYOUTS:
            size = chunk_size_for_layout(page_size, layout)
            assert size == ((page_size - 8) // CHUNKS[layout]) & ~3
            assert size % 4 == 0
            assert abi.chunk_sizes[layout] == size
            assert abi.try_partition_page(1, layout)
            assert word(region, page_size) == layout << 28
            for i in range(CHUNKS[layout]):
                chunk = abi.try_acquire_chunk_for_writing(1, i, chunk_id=i, writer_id=1)
                assert chunk is not None
                assert chunk.begin == page_size + 8 + i * size
                assert chunk.end <= 2 * page_size
            beyond = abi.try_acquire_chunk_for_writing(1, CHUNKS[layout], chunk_id=0, writer_id=1)
            assert beyond is None
            for i in range(CHUNKS[layout]):
                chunk = abi.get_chunk_unchecked(1, word(region, page_size), i)
                abi.release_chunk_as_complete(chunk)
                reading = abi.try_acquire_chunk_for_reading(1, i)
                assert reading is not None
                abi.release_chunk_as_free(reading)
            assert word(region, page_size) == 0
        for reserved in (PageLayout.NOT_PARTITIONED, PageLayout.RESERVED1, PageLayout.RESERVED2):
            assert chunk_size_for_layout(page_size, reserved) == 0
    finally:
        abi.close()
        region.close()


def test_bitmap_bits_follow_each_transition(region: SharedMemory) -> None:
    abi = SharedMemoryABI(region.buffer, 4096)
    try:
        assert abi.try_partition_page(0, PageLayout.DIV14)
        assert word(region, 0) == 0x50000000
        assert not abi.try_partition_page(0, PageLayout.DIV1)  # not free any more
        c13 = abi.try_acquire_chunk_for_writing(0, 13, chunk_id=1, writer_id=1)
        c2 = abi.try_acquire_chunk_for_writing(0, 2, chunk_id=2, writer_id=1)
        assert c13 is not None
        assert c2 is not None
        # Chunk i uses bits 2i+1..2i; BeingWritten = 1.
        assert word(region, 0) == 0x50000000 | (1 << 26) | (1 << 4)
        abi.release_chunk_as_complete(c13)
        assert word(region, 0) == 0x50000000 | (3 << 26) | (1 << 4)
        assert abi.chunk_state(0, 13) is ChunkState.COMPLETE
        bitmap = word(region, 0)
        assert chunk_state_from_bitmap(bitmap, 13) is ChunkState.COMPLETE
        assert chunk_state_from_bitmap(bitmap, 2) is ChunkState.BEING_WRITTEN
        assert chunk_state_from_bitmap(bitmap, 5) is ChunkState.FREE
        assert used_chunks_from_bitmap(bitmap) == (1 << 13) | (1 << 2)
        assert used_chunks_from_bitmap(0x60000003) == 0  # reserved layout: no chunks
        assert abi.try_acquire_chunk_for_reading(0, 2) is None  # BeingWritten, not Complete
        reading = abi.try_acquire_chunk_for_reading(0, 13)
        assert reading is not None
        assert word(region, 0) == 0x50000000 | (2 << 26) | (1 << 4)
        abi.release_chunk_as_free(reading)
        assert word(region, 0) == 0x50000000 | (1 << 4)  # layout kept: chunk 2 still busy
        abi.release_chunk_as_complete(c2)
        reading = abi.try_acquire_chunk_for_reading(0, 2)
        assert reading is not None
        abi.release_chunk_as_free(reading)
        assert word(region, 0) == 0  # last busy chunk freed: the page is reset
        assert abi.get_free_chunks(0) == 0  # unpartitioned: no chunks at all
        assert abi.is_page_free(0)
    finally:
        abi.close()


def test_page_complete_and_free_chunk_masks(region: SharedMemory) -> None:
    abi = SharedMemoryABI(region.buffer, 4096)
    try:
        assert abi.try_partition_page(0, PageLayout.DIV2)
        assert abi.get_free_chunks(0) == 0b11
        chunks = [abi.try_acquire_chunk_for_writing(0, i, chunk_id=i, writer_id=1) for i in (0, 1)]
        assert abi.get_free_chunks(0) == 0
        assert not abi.is_page_complete(0)
        for chunk in chunks:
            assert chunk is not None
            abi.release_chunk_as_complete(chunk)
        assert abi.is_page_complete(0)
        assert word(region, 0) == 0x20000000 | 0b1111
    finally:
        abi.close()


def test_chunk_header_bytes(region: SharedMemory) -> None:
    abi = SharedMemoryABI(region.buffer, 4096)
    try:
        abi.try_partition_page(0, PageLayout.DIV1)
        flags = ChunkFlags.FIRST_PACKET_CONTINUES_FROM_PREV_CHUNK | ChunkFlags.CHUNK_NEEDS_PATCHING
        chunk = abi.try_acquire_chunk_for_writing(
            0, 0, chunk_id=0x01020304, writer_id=0x0506, packet_count=3, flags=flags
        )
        assert chunk is not None
        assert region.buffer[8:16] == bytes([0x04, 0x03, 0x02, 0x01, 0x06, 0x05, 0x03, 0x14])
        chunk.set_flag(ChunkFlags.LAST_PACKET_CONTINUES_ON_NEXT_CHUNK)
        assert region.buffer[15] == 0x04 | 0x08 | 0x10
        assert chunk.increment_packet_count() == 4
        assert region.buffer[14] == 4
        chunk.clear_needs_patching_flag()
        assert region.buffer[15] == 0x04 | 0x08
        assert (chunk.chunk_id, chunk.writer_id) == (0x01020304, 0x0506)
        assert chunk.packet_count_and_flags() == (4, 0b011)
        abi.release_chunk_as_complete(chunk)
        reading = abi.try_acquire_chunk_for_reading(0, 0)
        assert reading is not None
        abi.release_chunk_as_free(reading)
        assert region.buffer[8:16] == bytes(8)  # freeing zeroes the header
    finally:
        abi.close()


def test_packet_count_is_ten_bits() -> None:
    header = pack_chunk_header(7, 9, 1023, 0b111)
    assert header[6:8] == bytes([0xFF, 0x1F])
    assert unpack_chunk_header(header) == (7, 9, 1023, 0b111)


def test_redundant_varint_fragment_prefix() -> None:
    buf = bytearray(4)
    write_redundant_varint(buf, 0, 200, 4)
    assert buf == bytes([0xC8, 0x81, 0x80, 0x00])
    write_redundant_varint(buf, 0, 0x0FFFFFFF, 4)
    assert buf == bytes([0xFF, 0xFF, 0xFF, 0x7F])  # kPacketSizeDropPacket


def test_begin_read_takes_a_complete_chunk_and_end_read_frees_it(region: SharedMemory) -> None:
    abi = SharedMemoryABI(region.buffer, 4096)
    try:
        assert abi.try_partition_page(1, PageLayout.DIV4)
        writing = abi.try_acquire_chunk_for_writing(1, 3, chunk_id=9, writer_id=1)
        busy = abi.try_acquire_chunk_for_writing(1, 0, chunk_id=10, writer_id=1)
        assert writing is not None
        assert busy is not None
        assert abi.begin_read(1, 3) is None  # BeingWritten, not Complete
        abi.release_chunk_as_complete(writing)
        assert abi.begin_read(1, 4) is None  # DIV4 has chunks 0-3
        assert abi.begin_read(1, 14) is None
        assert abi.begin_read(1, -1) is None
        with pytest.raises(SmbError, match="out of range"):
            abi.begin_read(64, 3)
        taken = abi.begin_read(1, 3)
        bitmap = 0x30000000 | (2 << 6) | 1  # chunk 3 BeingRead, chunk 0 BeingWritten
        assert taken == (4096 + 8 + 3 * 1020, 1020, bitmap)
        assert word(region, 4096) == bitmap
        assert abi.begin_read(1, 3) is None  # already taken
        abi.end_read(1, 3, *taken)
        assert word(region, 4096) == 0x30000001  # layout kept: chunk 0 still busy
        assert word(region, taken[0]) == word(region, taken[0] + 4) == 0  # header zeroed
        abi.release_chunk_as_complete(busy)
        last = abi.begin_read(1, 0)
        assert last is not None
        abi.end_read(1, 0, *last)
        assert word(region, 4096) == 0  # last busy chunk freed: the page is reset
    finally:
        abi.close()


def test_release_checks_the_state_machine(region: SharedMemory) -> None:
    abi = SharedMemoryABI(region.buffer, 4096)
    emulated = SharedMemoryABI(bytearray(8192), 4096, emulation=True)
    try:
        abi.try_partition_page(0, PageLayout.DIV1)
        chunk = abi.try_acquire_chunk_for_writing(0, 0, chunk_id=0, writer_id=1)
        assert chunk is not None
        with pytest.raises(SmbError, match="BEING_WRITTEN"):
            abi.release_chunk_as_free(chunk)  # BeingWritten -> Free is not a transition
        abi.release_chunk_as_complete(chunk)
        with pytest.raises(SmbError, match="COMPLETE"):
            abi.release_chunk_as_free(chunk)  # outside emulation the service reads first
        emulated.try_partition_page(1, PageLayout.DIV1)
        chunk = emulated.try_acquire_chunk_for_writing(1, 0, chunk_id=0, writer_id=1)
        assert chunk is not None
        emulated.release_chunk_as_complete(chunk)
        assert emulated.release_chunk_as_free(chunk) == 1  # Complete -> Free in emulation
        assert emulated.is_page_free(1)
    finally:
        abi.close()
        emulated.close()


def test_invalid_geometry_is_refused() -> None:
    with pytest.raises(SmbError, match="page size"):
        SharedMemoryABI(bytearray(3 * 4096), 3000)
    with pytest.raises(SmbError, match="multiple"):
        SharedMemoryABI(bytearray(6144), 4096)
    with pytest.raises(SmbError, match="page size"):
        SharedMemoryABI(bytearray(128 * 1024), 128 * 1024)
    abi = SharedMemoryABI(bytearray(4096), 4096)
    try:
        with pytest.raises(SmbError, match="out of range"):
            abi.page_header_bitmap(1)
        with pytest.raises(SmbError, match="layout"):
            abi.try_partition_page(0, PageLayout.RESERVED1)
    finally:
        abi.close()
