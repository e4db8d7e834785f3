"""The shared memory ABI: page header bitmaps, layouts, chunk headers and chunk states."""

from __future__ import annotations

import enum
import mmap
import os
import struct
import sys
import time
from collections.abc import Iterator

try:
    import cython
except ImportError:  # installed without Cython: runs as pure Python
    from protozero import _cython_shim as cython

from perfetto_smb._atomics import AtomicWords
from perfetto_smb._errors import SmbError
from perfetto_smb._region import MAX_ABI_PAGE_SIZE, MIN_PAGE_SIZE

if cython.compiled:
    from cython.cimports.cpython.bytes import PyBytes_FromStringAndSize
    from cython.cimports.libc.string import memset
    from cython.cimports.perfetto_smb._c_atomics import cas32, load32_relaxed

PAGE_HEADER_SIZE = 8
"""Bytes 0-3: the atomic bitmap; bytes 4-7: reserved."""
CHUNK_HEADER_SIZE = 8
"""chunk_id u32, writer_id u16, packets u16 (count in bits 0-9, flags in bits 10-15)."""
PACKET_HEADER_SIZE = 4
"""Size of the redundant varint that prefixes every fragment a writer starts."""
PACKET_SIZE_DROP_PACKET = 0x0FFFFFFF
"""Fragment size a writer stamps when it abandons a fragmented packet."""
MAX_CHUNKS_PER_PAGE = 14
MAX_PACKET_COUNT = 1023
"""The packet count is a 10-bit field."""
MAX_WRITER_ID = 32767
MAX_CHUNK_ID = 0xFFFFFFFF

LAYOUT_MASK = 0x70000000
LAYOUT_SHIFT = 28
ALL_CHUNKS_MASK = 0x0FFFFFFF
CHUNK_MASK = 0x3
CHUNK_SHIFT = 2

_RETRY_ATTEMPTS = 64
_HEADER = struct.Struct("<IHH")
_FREE = 0
_BEING_WRITTEN = 1
_BEING_READ = 2
_COMPLETE = 3
"""ChunkState values as plain ints, for hot paths."""
_NO_BYTES = bytearray(PAGE_HEADER_SIZE)


class ChunkState(enum.IntEnum):
    """The 2-bit state of a chunk in its page's bitmap."""

    FREE = 0
    BEING_WRITTEN = 1
    BEING_READ = 2
    COMPLETE = 3


class PageLayout(enum.IntEnum):
    """How a page is split into chunks (bits 30-28 of the bitmap)."""

    NOT_PARTITIONED = 0
    DIV1 = 1
    DIV2 = 2
    DIV4 = 3
    DIV7 = 4
    DIV14 = 5
    RESERVED1 = 6
    RESERVED2 = 7


_DIV1 = int(PageLayout.DIV1)
_DIV14 = int(PageLayout.DIV14)
"""The partitioned layouts' range as plain ints, for hot paths."""

NUM_CHUNKS_FOR_LAYOUT: tuple[int, ...] = (0, 1, 2, 4, 7, 14, 0, 0)
"""Chunks per page, indexed by PageLayout."""

# What a chunk's read and free compute with, compiled as C integers (_abi.pxd).
_PAGE_HEADER = PAGE_HEADER_SIZE
_CHUNK_HEADER = CHUNK_HEADER_SIZE
_LAYOUT_MASK = LAYOUT_MASK
_LAYOUT_SHIFT = LAYOUT_SHIFT
_ALL_CHUNKS_MASK = ALL_CHUNKS_MASK
_CHUNK_MASK = CHUNK_MASK
_CHUNK_SHIFT = CHUNK_SHIFT
_NUM_CHUNKS = NUM_CHUNKS_FOR_LAYOUT


class ChunkFlags(enum.IntFlag):
    """The flags of a chunk header (bits 10-12 of the packets field)."""

    FIRST_PACKET_CONTINUES_FROM_PREV_CHUNK = 1
    LAST_PACKET_CONTINUES_ON_NEXT_CHUNK = 2
    CHUNK_NEEDS_PATCHING = 4


def chunk_size_for_layout(page_size: int, layout: int) -> int:
    """Size in bytes (header included) of each chunk of a `page_size` page split by `layout`."""
    n = NUM_CHUNKS_FOR_LAYOUT[layout]
    if n == 0:
        return 0
    return ((page_size - PAGE_HEADER_SIZE) // n) & ~3


def layout_from_bitmap(bitmap: int) -> int:
    """The PageLayout stored in a page header bitmap."""
    return (bitmap & LAYOUT_MASK) >> LAYOUT_SHIFT


def num_chunks_from_bitmap(bitmap: int) -> int:
    """How many chunks the bitmap's layout has (0 for unpartitioned or reserved layouts)."""
    return NUM_CHUNKS_FOR_LAYOUT[(bitmap & LAYOUT_MASK) >> LAYOUT_SHIFT]


def chunk_state_from_bitmap(bitmap: int, chunk_idx: int) -> ChunkState:
    """The state of chunk `chunk_idx` in a page header bitmap."""
    return ChunkState((bitmap >> (chunk_idx * CHUNK_SHIFT)) & CHUNK_MASK)


def used_chunks_from_bitmap(bitmap: int) -> int:
    """A bit mask with bit i set when chunk i of the page is not Free."""
    result = 0
    for i in range(num_chunks_from_bitmap(bitmap)):
        if (bitmap >> (i * CHUNK_SHIFT)) & CHUNK_MASK:
            result |= 1 << i
    return result


def pack_chunk_header(chunk_id: int, writer_id: int, packet_count: int, flags: int) -> bytes:
    """The 8 bytes of a chunk header."""
    return _HEADER.pack(chunk_id, writer_id, (packet_count & 0x3FF) | ((flags & 0x3F) << 10))


def unpack_chunk_header(data: bytes | bytearray | memoryview) -> tuple[int, int, int, int]:
    """(chunk_id, writer_id, packet_count, flags) from the first 8 bytes of `data`."""
    chunk_id, writer_id, packets = _HEADER.unpack_from(data)
    return chunk_id, writer_id, packets & 0x3FF, packets >> 10


def _wait_before_next_attempt(attempt: int) -> None:
    if attempt < _RETRY_ATTEMPTS // 2:
        os.sched_yield()
    else:
        time.sleep((attempt // 10) / 1000)


class Chunk:
    """A chunk acquired from (or located in) a SharedMemoryABI: where it is, what it holds."""

    __slots__ = ("_abi", "begin", "chunk_idx", "page_idx", "size")

    def __init__(
        self, abi: SharedMemoryABI, page_idx: int, chunk_idx: int, begin: int, size: int
    ) -> None:
        self._abi = abi
        self.page_idx = page_idx
        self.chunk_idx = chunk_idx
        self.begin = begin
        """Offset of the chunk header in the buffer."""
        self.size = size
        """Chunk size, header included."""

    @property
    def payload_begin(self) -> int:
        """Offset of the payload (after the 8-byte header) in the buffer."""
        return self.begin + CHUNK_HEADER_SIZE

    @property
    def end(self) -> int:
        """Offset just past the chunk in the buffer."""
        return self.begin + self.size

    @property
    def payload_size(self) -> int:
        """Payload bytes: the chunk size minus the header."""
        return self.size - CHUNK_HEADER_SIZE

    @property
    def chunk_id(self) -> int:
        """The header's chunk_id."""
        return int(self._abi.words[self.begin >> 2])

    @property
    def writer_id(self) -> int:
        """The header's writer_id."""
        return int(self._abi.halves[(self.begin + 4) >> 1])

    def packet_count_and_flags(self) -> tuple[int, int]:
        """(packet count, flags) from the header."""
        packets = int(self._abi.halves[(self.begin + 6) >> 1])
        return packets & 0x3FF, packets >> 10

    def increment_packet_count(self) -> int:
        """Adds one to the header's packet count; returns the new count."""
        halves = self._abi.halves
        index = (self.begin + 6) >> 1
        packets = halves[index]
        count = ((packets & 0x3FF) + 1) & 0x3FF
        halves[index] = (packets & 0xFC00) | count
        return count

    def set_flag(self, flag: int) -> None:
        """Sets `flag` (a ChunkFlags bit) in the header."""
        halves = self._abi.halves
        index = (self.begin + 6) >> 1
        halves[index] = halves[index] | ((flag & 0x3F) << 10)

    def clear_needs_patching_flag(self) -> None:
        """Clears ChunkNeedsPatching in the header."""
        halves = self._abi.halves
        index = (self.begin + 6) >> 1
        halves[index] = halves[index] & ~(ChunkFlags.CHUNK_NEEDS_PATCHING << 10) & 0xFFFF

    def read(self) -> bytes:
        """A copy of the whole chunk, header included."""
        return bytes(self._abi.view[self.begin : self.begin + self.size])

    def __repr__(self) -> str:
        return f"Chunk(page={self.page_idx}, chunk={self.chunk_idx}, size={self.size})"


class SharedMemoryABI:
    """Pages, chunks and their state machine over the mapped bytes of an SMB.

    Every state change is an atomic compare-and-swap on the page's 32-bit header word, so it
    is safe against another process (C++ or Python) mapping the same memory. In emulation
    mode the producer itself frees completed chunks (their bytes travel over IPC).
    """

    __slots__ = (
        "_atomics",
        "_bytes",
        "buffer",
        "chunk_sizes",
        "emulation",
        "halves",
        "num_pages",
        "page_size",
        "size",
        "view",
        "words",
    )

    def __init__(
        self, buffer: mmap.mmap | bytearray, page_size: int, *, emulation: bool = False
    ) -> None:
        if sys.byteorder != "little":
            raise SmbError("the SMB ABI is little-endian; big-endian hosts are not supported")
        size = len(buffer)
        if not (MIN_PAGE_SIZE <= page_size <= MAX_ABI_PAGE_SIZE and page_size % MIN_PAGE_SIZE == 0):
            raise SmbError(f"invalid SMB page size {page_size} (4-64 KiB in 4 KiB steps)")
        if size == 0 or size % page_size:
            raise SmbError(f"SMB size {size} is not a positive multiple of the page {page_size}")
        self.buffer = buffer
        self.size = size
        self.page_size = page_size
        self.num_pages = size // page_size
        self.emulation = emulation
        self.chunk_sizes: tuple[int, ...] = tuple(
            chunk_size_for_layout(page_size, layout) for layout in range(8)
        )
        self._atomics = AtomicWords(buffer)
        if cython.compiled:
            self._bytes = buffer
        self.view = memoryview(buffer)
        """The buffer as bytes (a memoryview writers write through)."""
        self.words = self.view.cast("I")
        """The buffer as 32-bit words (plain, relaxed access)."""
        self.halves = self.view.cast("H")
        """The buffer as 16-bit halves (plain access)."""

    def close(self) -> None:
        """Releases the buffer (so its mapping can be closed); the ABI is unusable after."""
        self._atomics.close()
        self.num_pages = 0
        if cython.compiled:
            self._bytes = _NO_BYTES
        self.words.release()
        self.halves.release()
        self.view.release()

    def _page_offset(self, page_idx: int) -> int:
        if not 0 <= page_idx < self.num_pages:
            raise SmbError(f"page {page_idx} out of range (the SMB has {self.num_pages} pages)")
        return page_idx * self.page_size

    def _relaxed_word(self, offset: int) -> int:
        """The 32-bit word at `offset` (a checked, aligned offset), without ordering."""
        if cython.compiled:
            word: int = load32_relaxed(cython.address(self._bytes[offset]))
            return word
        return int(self.words[offset >> 2])

    def _compare_exchange(self, offset: int, expected: int, desired: int) -> int:
        """AtomicWords.compare_exchange at a checked, aligned `offset`."""
        if cython.compiled:
            found: int = cas32(cython.address(self._bytes[offset]), expected, desired)
            return found
        return self._atomics.compare_exchange(offset, expected, desired)

    def _take_chunk_bytes(self, begin: int, size: int) -> tuple[int, int, bytes]:
        """(chunk_id word, packets word, payload) of the `size`-byte chunk at `begin` (a
        checked range)."""
        chunk_id = self._relaxed_word(begin)
        packets = self._relaxed_word(begin + 4)
        payload_begin = begin + CHUNK_HEADER_SIZE
        if cython.compiled:
            payload: bytes = PyBytes_FromStringAndSize(
                cython.cast(cython.p_char, cython.address(self._bytes[payload_begin])),
                size - CHUNK_HEADER_SIZE,
            )
            return chunk_id, packets, payload
        buffer = self.buffer
        if isinstance(buffer, mmap.mmap):
            payload = buffer[payload_begin : begin + size]
        else:
            payload = bytes(buffer[payload_begin : begin + size])
        return chunk_id, packets, payload

    def _write_chunk_header(
        self, begin: int, chunk_id: int, writer_id: int, packet_count: int, flags: int
    ) -> None:
        """Writes pack_chunk_header(chunk_id, writer_id, packet_count, flags) at `begin`."""
        packets = (packet_count & 0x3FF) | ((flags & 0x3F) << 10)
        _HEADER.pack_into(self.view, begin, chunk_id, writer_id, packets)

    def page_header_bitmap(self, page_idx: int) -> int:
        """The page's header bitmap, loaded with acquire ordering."""
        return self._atomics.load(self._page_offset(page_idx))

    def relaxed_page_header_bitmap(self, page_idx: int) -> int:
        """The page's header bitmap, read without ordering (a hint; may be stale)."""
        return self._relaxed_word(self._page_offset(page_idx))

    def is_page_free(self, page_idx: int) -> bool:
        """Whether the page is unpartitioned with every chunk free (bitmap 0)."""
        return self.relaxed_page_header_bitmap(page_idx) == 0

    def is_page_complete(self, page_idx: int) -> bool:
        """Whether every chunk of a partitioned page is Complete."""
        bitmap = self.relaxed_page_header_bitmap(page_idx)
        n = num_chunks_from_bitmap(bitmap)
        if n == 0:
            return False
        all_complete = ALL_CHUNKS_MASK & ((1 << (n * CHUNK_SHIFT)) - 1)
        return bitmap & ALL_CHUNKS_MASK == all_complete

    def chunk_state(self, page_idx: int, chunk_idx: int) -> ChunkState:
        """The current state of one chunk."""
        return chunk_state_from_bitmap(self.relaxed_page_header_bitmap(page_idx), chunk_idx)

    def get_free_chunks(self, page_idx: int) -> int:
        """A bit mask with bit i set when chunk i of the page is Free."""
        bitmap = self.relaxed_page_header_bitmap(page_idx)
        result = 0
        for i in range(num_chunks_from_bitmap(bitmap)):
            if not (bitmap >> (i * CHUNK_SHIFT)) & CHUNK_MASK:
                result |= 1 << i
        return result

    def scrapable_chunks(self) -> Iterator[tuple[Chunk, bool]]:
        """(chunk, complete) for each BeingWritten or Complete chunk, in page order.

        A BeingWritten chunk is included only once it holds a finished packet (a count of 2
        or more; its last counted packet may be unfinished). Nothing changes state.
        """
        for page_idx in range(self.num_pages):
            bitmap = self.page_header_bitmap(page_idx)
            for chunk_idx in range(num_chunks_from_bitmap(bitmap)):
                state = (bitmap >> (chunk_idx * CHUNK_SHIFT)) & CHUNK_MASK
                if state not in (ChunkState.BEING_WRITTEN, ChunkState.COMPLETE):
                    continue
                chunk = self.get_chunk_unchecked(page_idx, bitmap, chunk_idx)
                complete = state == ChunkState.COMPLETE
                if complete or chunk.packet_count_and_flags()[0] >= 2:
                    yield chunk, complete

    def try_partition_page(self, page_idx: int, layout: int) -> bool:
        """Moves a free page (bitmap 0) to `layout` with all chunks Free; False if not free."""
        if not PageLayout.DIV1 <= layout <= PageLayout.DIV14:
            raise SmbError(f"cannot partition a page with layout {layout}")
        offset = self._page_offset(page_idx)
        desired = (layout << LAYOUT_SHIFT) & LAYOUT_MASK
        return self._atomics.compare_exchange(offset, 0, desired) == 0

    def get_chunk_unchecked(self, page_idx: int, bitmap: int, chunk_idx: int) -> Chunk:
        """The chunk `chunk_idx` of a page whose layout is the one in `bitmap`."""
        layout = layout_from_bitmap(bitmap)
        if chunk_idx >= NUM_CHUNKS_FOR_LAYOUT[layout] or chunk_idx < 0:
            raise SmbError(f"chunk {chunk_idx} out of range for layout {layout}")
        size = self.chunk_sizes[layout]
        begin = self._page_offset(page_idx) + PAGE_HEADER_SIZE + chunk_idx * size
        return Chunk(self, page_idx, chunk_idx, begin, size)

    def _try_acquire(self, page_idx: int, chunk_idx: int, desired: ChunkState) -> Chunk | None:
        offset = self._page_offset(page_idx)
        expected_state = ChunkState.FREE if desired == ChunkState.BEING_WRITTEN else 3
        shift = chunk_idx * CHUNK_SHIFT
        bitmap = self._relaxed_word(offset)
        for attempt in range(_RETRY_ATTEMPTS):
            if not 0 <= chunk_idx < num_chunks_from_bitmap(bitmap):
                return None
            if (bitmap >> shift) & CHUNK_MASK != expected_state:
                return None
            desired_bitmap = (bitmap & ~(CHUNK_MASK << shift)) | (desired << shift)
            found = self._compare_exchange(offset, bitmap, desired_bitmap)
            if found == bitmap:
                return self.get_chunk_unchecked(page_idx, bitmap, chunk_idx)
            bitmap = found
            _wait_before_next_attempt(attempt)
        return None

    def try_acquire_chunk_for_writing(
        self,
        page_idx: int,
        chunk_idx: int,
        *,
        chunk_id: int,
        writer_id: int,
        packet_count: int = 0,
        flags: int = 0,
    ) -> Chunk | None:
        """Free -> BeingWritten, then writes the header; None if the chunk is not Free."""
        return self._acquire_for_writing(
            page_idx, chunk_idx, chunk_id, writer_id, packet_count, flags
        )

    def _acquire_for_writing(  # noqa: PLR0917 - the arbiter's hot path, compiled a C call
        self,
        page_idx: int,
        chunk_idx: int,
        chunk_id: int,
        writer_id: int,
        packet_count: int,
        flags: int,
    ) -> Chunk | None:
        """try_acquire_chunk_for_writing() with positional arguments."""
        chunk = self._try_acquire(page_idx, chunk_idx, ChunkState.BEING_WRITTEN)
        if chunk is not None:
            self._write_chunk_header(chunk.begin, chunk_id, writer_id, packet_count, flags)
        return chunk

    def try_acquire_chunk_in_free_page(
        self,
        page_idx: int,
        layout: int,
        *,
        chunk_id: int,
        writer_id: int,
        packet_count: int = 0,
        flags: int = 0,
    ) -> Chunk | None:
        """Partitions a free page and takes its chunk 0 for writing, in one CAS.

        The same end state as try_partition_page() then try_acquire_chunk_for_writing(0),
        with one atomic operation instead of two. None if the page is not free.
        """
        if not _DIV1 <= layout <= _DIV14:
            raise SmbError(f"cannot partition a page with layout {layout}")
        return self._acquire_in_free_page(
            page_idx, layout, chunk_id, writer_id, packet_count, flags
        )

    def _acquire_in_free_page(  # noqa: PLR0917 - the arbiter's hot path, compiled a C call
        self,
        page_idx: int,
        layout: int,
        chunk_id: int,
        writer_id: int,
        packet_count: int,
        flags: int,
    ) -> Chunk | None:
        """try_acquire_chunk_in_free_page() with positional arguments and a checked layout."""
        offset = self._page_offset(page_idx)
        layout_shift = LAYOUT_SHIFT
        layout_mask = LAYOUT_MASK
        header_size = PAGE_HEADER_SIZE
        desired = ((layout << layout_shift) & layout_mask) | _BEING_WRITTEN
        if self._compare_exchange(offset, 0, desired) != 0:
            return None
        size = self.chunk_sizes[layout]
        begin = offset + header_size
        self._write_chunk_header(begin, chunk_id, writer_id, packet_count, flags)
        return Chunk(self, page_idx, 0, begin, size)

    def try_acquire_chunk_for_reading(self, page_idx: int, chunk_idx: int) -> Chunk | None:
        """Complete -> BeingRead; None if the chunk is not (or no longer) Complete."""
        return self._try_acquire(page_idx, chunk_idx, ChunkState.BEING_READ)

    def read_and_free_chunk(
        self, page_idx: int, chunk_idx: int
    ) -> tuple[int, int, int, int, bytes] | None:
        """Complete -> BeingRead, copies the chunk out, then frees it, as a service reads it.

        The same steps as try_acquire_chunk_for_reading(), Chunk.read() and
        release_chunk_as_free(), in one call. Returns (chunk_id, writer_id, packet_count,
        flags, payload), or None if the chunk is not (or no longer) Complete; raises
        SmbError, after copying, if the page changed layout or the chunk's state while read.
        """
        taken = self.begin_read(page_idx, chunk_idx)
        if taken is None:
            return None
        begin, size, bitmap = taken
        chunk_id, packets, payload = self._take_chunk_bytes(begin, size)
        self.end_read(page_idx, chunk_idx, begin, size, bitmap)
        return chunk_id, packets & 0xFFFF, (packets >> 16) & 0x3FF, packets >> 26, payload

    def begin_read(self, page_idx: int, chunk_idx: int) -> tuple[int, int, int] | None:
        """Complete -> BeingRead, as a service starts reading a chunk.

        Returns (begin, size, bitmap): the chunk's offset and size (header included) and
        the page's bitmap after the change, for end_read(); or None if the chunk is not
        (or no longer) Complete.
        """
        if not 0 <= chunk_idx < MAX_CHUNKS_PER_PAGE:
            return None
        self._page_offset(page_idx)  # raises for a page out of range
        begin, size, bitmap = self._begin_read(page_idx, chunk_idx)
        if begin < 0:
            return None
        return begin, size, bitmap

    def _begin_read(self, page_idx: int, chunk_idx: int) -> tuple[int, int, int]:
        """begin_read() of a chunk in range of a page in range, with a `begin` of -1 for None.

        Compiled, the values are C integers (a C tuple): no Python object.
        """
        offset = page_idx * self.page_size
        shift = chunk_idx * _CHUNK_SHIFT
        # Complete (0b11) -> BeingRead (0b10) clears the state's low bit.
        state_low_bit = 1 << shift
        bitmap = self._relaxed_word(offset)
        layout = 0
        for attempt in range(_RETRY_ATTEMPTS):
            layout = (bitmap & _LAYOUT_MASK) >> _LAYOUT_SHIFT
            chunks = _NUM_CHUNKS[layout]
            if chunk_idx >= chunks:
                return -1, 0, 0
            if (bitmap >> shift) & _CHUNK_MASK != _COMPLETE:
                return -1, 0, 0
            found = self._compare_exchange(offset, bitmap, bitmap ^ state_low_bit)
            if found == bitmap:
                break
            bitmap = found
            _wait_before_next_attempt(attempt)
        else:
            return -1, 0, 0
        size = self.chunk_sizes[layout]
        return offset + _PAGE_HEADER + chunk_idx * size, size, bitmap ^ state_low_bit

    def end_read(self, page_idx: int, chunk_idx: int, begin: int, size: int, bitmap: int) -> None:
        """Zeroes the header of a chunk begin_read() returned, then frees it (BeingRead -> Free).

        Raises SmbError if the page changed layout or the chunk's state since begin_read().
        """
        if cython.compiled:
            memset(cython.address(self._bytes[begin]), 0, _CHUNK_HEADER)
        else:
            words = self.words
            words[begin >> 2] = 0
            words[(begin >> 2) + 1] = 0
        offset = begin - _PAGE_HEADER - chunk_idx * size
        freed = bitmap & ~(_CHUNK_MASK << (chunk_idx * _CHUNK_SHIFT))
        if not freed & _ALL_CHUNKS_MASK:
            freed = 0  # the page's last busy chunk: the page goes back to unpartitioned
        if self.emulation or self._compare_exchange(offset, bitmap, freed) != bitmap:
            self._release_read_chunk(offset, page_idx, chunk_idx, size, bitmap)

    def _release_read_chunk(
        self, offset: int, page_idx: int, chunk_idx: int, size: int, bitmap: int
    ) -> None:
        """BeingRead (Complete in emulation) -> Free, when a first attempt did not do it.

        `bitmap` is the value that attempt expected (or a fresh read in emulation mode).
        """
        shift = chunk_idx * CHUNK_SHIFT
        expected_state = ChunkState.COMPLETE if self.emulation else ChunkState.BEING_READ
        keep = ~(CHUNK_MASK << shift)
        for attempt in range(_RETRY_ATTEMPTS):
            if self.chunk_sizes[(bitmap & LAYOUT_MASK) >> LAYOUT_SHIFT] != size:
                raise SmbError(f"page {page_idx} changed layout under chunk {chunk_idx}")
            state = (bitmap >> shift) & CHUNK_MASK
            if state != expected_state:
                raise SmbError(
                    f"chunk {chunk_idx} of page {page_idx} is {ChunkState(state).name}, "
                    f"expected {expected_state.name}"
                )
            desired = bitmap & keep
            if desired & ALL_CHUNKS_MASK == 0:
                desired = 0
            found = self._compare_exchange(offset, bitmap, desired)
            if found == bitmap:
                return
            bitmap = found
            _wait_before_next_attempt(attempt)
        raise SmbError(f"too much contention on page {page_idx}")

    def release_chunk_as_complete(self, chunk: Chunk) -> int:
        """BeingWritten -> Complete; returns the page index."""
        return self._release(chunk, _COMPLETE)

    def release_chunk_as_free(self, chunk: Chunk) -> int:
        """BeingRead (Complete in emulation) -> Free, zeroing the header first.

        Freeing the last busy chunk of a page resets its whole bitmap to 0. Returns the page
        index.
        """
        self.buffer[chunk.begin : chunk.begin + CHUNK_HEADER_SIZE] = bytes(CHUNK_HEADER_SIZE)
        return self._release(chunk, _FREE)

    def _release(self, chunk: Chunk, desired: int) -> int:
        page_idx = chunk.page_idx
        offset = self._page_offset(page_idx)
        if not 0 <= chunk.chunk_idx < MAX_CHUNKS_PER_PAGE:
            raise SmbError(f"{chunk!r} is outside its page")
        shift = chunk.chunk_idx * CHUNK_SHIFT
        if desired == _COMPLETE:
            expected_state = _BEING_WRITTEN
        elif self.emulation:
            expected_state = _COMPLETE
        else:
            expected_state = _BEING_READ
        size = chunk.size
        chunk_mask = CHUNK_MASK
        layout_mask = LAYOUT_MASK
        layout_shift = LAYOUT_SHIFT
        all_chunks_mask = ALL_CHUNKS_MASK
        keep = 0xFFFFFFFF ^ (chunk_mask << shift)
        bitmap = self._relaxed_word(offset)
        for attempt in range(_RETRY_ATTEMPTS):
            if self.chunk_sizes[(bitmap & layout_mask) >> layout_shift] != size:
                raise SmbError(f"page {page_idx} changed layout under {chunk!r}")
            state = (bitmap >> shift) & chunk_mask
            if state != expected_state:
                raise SmbError(
                    f"{chunk!r} is {ChunkState(state).name}, "
                    f"expected {ChunkState(expected_state).name}"
                )
            desired_bitmap = (bitmap & keep) | (desired << shift)
            if desired_bitmap & all_chunks_mask == 0:
                desired_bitmap = 0
            found = self._compare_exchange(offset, bitmap, desired_bitmap)
            if found == bitmap:
                return page_idx
            bitmap = found
            _wait_before_next_attempt(attempt)
        raise SmbError(f"too much contention on page {page_idx}")
