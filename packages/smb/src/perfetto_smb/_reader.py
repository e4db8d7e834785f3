"""The service side of an SMB: validate, copy out and free committed chunks; scrape."""

from __future__ import annotations

import collections
from collections.abc import Container
from typing import NamedTuple

try:
    import cython
except ImportError:  # installed without Cython: runs as pure Python
    from protozero import _cython_shim as cython

from perfetto_smb._abi import (
    CHUNK_HEADER_SIZE,
    MAX_CHUNKS_PER_PAGE,
    MAX_WRITER_ID,
    num_chunks_from_bitmap,
    unpack_chunk_header,
)
from perfetto_smb._errors import SmbError

if not cython.compiled:  # compiled, the .pxd cimports it from _abi
    from perfetto_smb._abi import SharedMemoryABI

MAX_EMULATED_CHUNK_SIZE = 65535
"""Chunks sent over IPC (emulation mode) are at most this big, header included."""


class CopiedChunk(NamedTuple):
    """A chunk copied out of an SMB (or received over IPC): its header and payload bytes."""

    page: int
    chunk: int
    writer_id: int
    chunk_id: int
    packet_count: int
    flags: int
    complete: bool
    """False for a chunk scraped while still BeingWritten (its last fragment may be unfinished)."""
    payload: bytes


_new_tuple = tuple.__new__
"""Makes a CopiedChunk from a ready tuple, without the field-by-field constructor."""


class SharedMemoryReader:
    """Reads chunks a producer committed into its SMB, defensively.

    Nothing in the SMB is trusted: page and chunk indexes, layouts and states are checked
    before a chunk is touched; a bad request is rejected and counted in `rejected` (by
    reason), never raised.
    """

    __slots__ = (
        "_begin",
        "_bitmap",
        "_chunk",
        "_chunk_id",
        "_flags",
        "_open_payload",
        "_packet_count",
        "_page",
        "_size",
        "_writer_id",
        "abi",
        "chunks_read",
        "rejected",
    )

    def __init__(self, abi: SharedMemoryABI) -> None:
        self.abi = abi
        self.rejected: collections.Counter[str] = collections.Counter()
        """Rejected chunks, by reason."""
        self.chunks_read = 0
        # The chunk _begin_chunk() opened (`_page` -1: none) and its header's fields.
        self._page = -1
        self._chunk = 0
        self._begin = 0
        self._size = 0
        self._bitmap = 0
        self._writer_id = 0
        self._chunk_id = 0
        self._packet_count = 0
        self._flags = 0
        self._open_payload: memoryview | None = None

    def _reject(self, reason: str) -> None:
        self.rejected[reason] += 1

    def read_chunk(self, page_idx: int, chunk_idx: int) -> CopiedChunk | None:
        """Moves a Complete chunk to BeingRead, copies it, then frees it.

        Returns None (and counts the reason) when the page or chunk index is out of range,
        the page's layout has no such chunk, the chunk is not Complete, its header is bad,
        or the producer changed the page while the chunk was read.
        """
        opened = self.open_chunk(page_idx, chunk_idx)
        if opened is None:
            return None
        writer_id, chunk_id, count, flags, view = opened
        payload = bytes(view)
        if not self.close_chunk():
            return None
        chunk: CopiedChunk = _new_tuple(
            CopiedChunk, (page_idx, chunk_idx, writer_id, chunk_id, count, flags, True, payload)
        )
        return chunk

    def open_chunk(
        self, page_idx: int, chunk_idx: int
    ) -> tuple[int, int, int, int, memoryview] | None:
        """Moves a Complete chunk to BeingRead, for the caller to copy; close_chunk() frees it.

        Returns (writer_id, chunk_id, packet_count, flags, payload), the payload a view of
        the chunk in the SMB, valid until close_chunk(). Returns None (and counts the
        reason, as read_chunk() does) when the chunk cannot be read; a chunk with a bad
        writer id is freed at once.
        """
        if not self._begin_chunk(page_idx, chunk_idx):
            return None
        begin = self._begin
        payload = self.abi.view[begin + CHUNK_HEADER_SIZE : begin + self._size]
        self._open_payload = payload
        return self._writer_id, self._chunk_id, self._packet_count, self._flags, payload

    def _chunk_payload(self) -> bytes | bytearray | memoryview:
        """The payload of the chunk _begin_chunk() opened, valid until close_chunk().

        Compiled, a view of the SMB's bytes that is no Python object.
        """
        header_size = CHUNK_HEADER_SIZE  # compiled, a C integer: no Python int per chunk
        start = self._begin + header_size
        end = self._begin + self._size
        if cython.compiled:
            return self.abi._bytes[start:end]
        payload = self.abi.view[start:end]
        self._open_payload = payload
        return payload

    def _begin_chunk(self, page_idx: int, chunk_idx: int) -> bool:
        """open_chunk() without the tuple and view: the chunk's place and header fields are
        kept in the reader (`_begin`, `_size`, `_writer_id`, ...) until close_chunk().
        """
        abi = self.abi
        if not 0 <= page_idx < abi.num_pages:
            self._reject("page_out_of_range")
            return False
        begin = -1
        if 0 <= chunk_idx < MAX_CHUNKS_PER_PAGE:
            begin, size, bitmap = abi._begin_read(page_idx, chunk_idx)
        if begin < 0:
            bitmap = abi.relaxed_page_header_bitmap(page_idx)
            if 0 <= chunk_idx < num_chunks_from_bitmap(bitmap):
                self._reject("chunk_not_complete")
            else:
                self._reject("chunk_out_of_range")
            return False
        chunk_id = abi._relaxed_word(begin)
        packets = abi._relaxed_word(begin + 4)
        writer_id = packets & 0xFFFF
        if not 1 <= writer_id <= MAX_WRITER_ID:
            if self._end_read(page_idx, chunk_idx, begin, size, bitmap):
                self._reject("invalid_writer_id")
            return False
        self._page = page_idx
        self._chunk = chunk_idx
        self._begin = begin
        self._size = size
        self._bitmap = bitmap
        self._writer_id = writer_id
        self._chunk_id = chunk_id
        self._packet_count = (packets >> 16) & 0x3FF
        self._flags = packets >> 26
        return True

    def close_chunk(self) -> bool:
        """Frees the chunk open_chunk() returned; its payload view is released.

        False (counted as "chunk_changed_while_read") if the producer changed the page's
        layout or the chunk's state since open_chunk().
        """
        payload = self._open_payload
        self._open_payload = None
        if payload is not None:
            payload.release()
        page_idx = self._page
        if page_idx < 0:
            return False
        self._page = -1
        if not self._end_read(page_idx, self._chunk, self._begin, self._size, self._bitmap):
            return False
        self.chunks_read += 1
        return True

    def _end_read(self, page_idx: int, chunk_idx: int, begin: int, size: int, bitmap: int) -> bool:
        try:
            self.abi.end_read(page_idx, chunk_idx, begin, size, bitmap)
        except SmbError:
            self._reject("chunk_changed_while_read")
            return False
        return True

    def _make(self, page: int, chunk: int, data: bytes, *, complete: bool) -> CopiedChunk | None:
        chunk_id, writer_id, count, flags = unpack_chunk_header(data)
        if not 1 <= writer_id <= MAX_WRITER_ID:
            self._reject("invalid_writer_id")
            return None
        self.chunks_read += 1
        return CopiedChunk(
            page, chunk, writer_id, chunk_id, count, flags, complete, data[CHUNK_HEADER_SIZE:]
        )

    def chunk_from_bytes(
        self, chunk_idx: int, data: bytes, *, complete: bool = True
    ) -> CopiedChunk | None:
        """A chunk received over IPC (emulation mode: `data` = header + payload)."""
        if not CHUNK_HEADER_SIZE <= len(data) <= MAX_EMULATED_CHUNK_SIZE:
            self._reject("bad_chunk_size")
            return None
        return self._make(0, chunk_idx, bytes(data), complete=complete)

    def scrape(self, writer_ids: Container[int] | None = None) -> list[CopiedChunk]:
        """Copies every BeingWritten or Complete chunk, without changing any state.

        A BeingWritten chunk is taken only if it holds at least one finished packet (a count
        of 2 or more). `writer_ids` keeps only chunks of those writers.
        """
        result: list[CopiedChunk] = []
        for chunk, complete in self.abi.scrapable_chunks():
            if writer_ids is not None and chunk.writer_id not in writer_ids:
                continue
            copied = self._make(chunk.page_idx, chunk.chunk_idx, chunk.read(), complete=complete)
            if copied is not None:
                result.append(copied)
        return result
