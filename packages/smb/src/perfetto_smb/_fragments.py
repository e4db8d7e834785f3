"""Parsing a chunk payload into its fragments; validating and applying patches."""

from __future__ import annotations

from dataclasses import dataclass, field

from protozero import read_varint

from perfetto_smb._abi import PACKET_HEADER_SIZE, PACKET_SIZE_DROP_PACKET, ChunkFlags

PATCH_SIZE = 4
"""A patch overwrites exactly one 4-byte redundant varint."""
MAX_PATCHES_PER_CHUNK_TO_PATCH = 1024


@dataclass(slots=True)
class ChunkFragments:
    """The fragments of one chunk, in order, with what the header says about the ends.

    `fragments` keeps empty ones (an empty whole packet is to be skipped).
    `first_continues` means fragments[0] is the tail of a packet begun in an earlier chunk;
    `last_continues` means the last fragment goes on in a later chunk. `writer_aborted` means
    the writer abandoned the packet being written (kPacketSizeDropPacket); `error` says why
    parsing stopped early on bad data.
    """

    fragments: list[bytes] = field(default_factory=list)
    first_continues: bool = False
    last_continues: bool = False
    writer_aborted: bool = False
    error: str | None = None


def read_fragment_size(payload: bytes | bytearray | memoryview, offset: int) -> tuple[int, int]:
    """Decodes the varint fragment size at `offset` (at most 4 bytes).

    Returns (size, offset of the fragment's data); size -1 when the varint is truncated or
    longer than 4 bytes.
    """
    limit = min(len(payload), offset + PACKET_HEADER_SIZE)
    size, data_begin = read_varint(payload, offset, limit)
    if data_begin < 0:
        return -1, limit
    return size, data_begin


def parse_chunk_payload(
    payload: bytes | bytearray | memoryview, packet_count: int, flags: int, *, complete: bool = True
) -> ChunkFragments:
    """Splits a chunk's payload into its `packet_count` fragments.

    For an incomplete chunk (scraped while BeingWritten) the last counted fragment may be
    unfinished and is left out. Any header value is survivable: bad data ends parsing with
    `error` set and the fragments read so far.
    """
    result = ChunkFragments(
        first_continues=bool(flags & ChunkFlags.FIRST_PACKET_CONTINUES_FROM_PREV_CHUNK),
        last_continues=bool(flags & ChunkFlags.LAST_PACKET_CONTINUES_ON_NEXT_CHUNK),
    )
    count = packet_count if complete else packet_count - 1
    if not complete:
        result.last_continues = False
    offset = 0
    end = len(payload)
    for index in range(max(count, 0)):
        if offset >= end:
            result.error = f"fragment {index} of {packet_count} starts past the payload end"
            return result
        size, data_begin = read_fragment_size(payload, offset)
        if size == PACKET_SIZE_DROP_PACKET:
            result.writer_aborted = True
            result.last_continues = False
            return result
        if size < 0:
            result.error = f"fragment {index} has a truncated or over-long size varint"
            return result
        data_end = data_begin + size
        if data_end > end:
            result.error = f"fragment {index} of {size} bytes runs past the payload end"
            return result
        result.fragments.append(bytes(payload[data_begin:data_end]))
        offset = data_end
    return result


def is_valid_patch(payload_size: int, offset: int, data: bytes) -> bool:
    """Whether a patch can apply to a payload of `payload_size` bytes (4 bytes, in bounds)."""
    return len(data) == PATCH_SIZE and 0 <= offset <= payload_size - PATCH_SIZE


def apply_patch(payload: bytearray, offset: int, data: bytes) -> bool:
    """Writes a 4-byte patch at `offset` of a copied payload; False (and no write) if invalid."""
    if not is_valid_patch(len(payload), offset, data):
        return False
    payload[offset : offset + PATCH_SIZE] = data
    return True
