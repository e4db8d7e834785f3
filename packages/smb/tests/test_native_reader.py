"""The compiled ABI and reader (SharedMemoryABI, SharedMemoryReader) against the pure ones."""

from __future__ import annotations

import pytest
from perfetto_smb import Chunk, PageLayout, SharedMemoryABI, SharedMemoryReader, SmbError
from protozero import _native
from smb_testlib import run_probe

# Reads every (page, chunk) of a seeded hostile SMB, in the build the environment picks, and
# prints what came out and what the buffer holds after.
_PROBE = """
import hashlib, random, struct
from perfetto_smb import SharedMemoryABI, SharedMemoryReader

PAGE, PAGES = 4096, 64
rng = random.Random(7)
buf = bytearray(rng.randbytes(PAGE * PAGES))
for page in range(PAGES):
    # Every layout (reserved ones too), with a random state for each chunk.
    bitmap = ((page % 8) << 28) | rng.getrandbits(28)
    if page % 3 == 0:
        bitmap |= 0x0FFFFFFF  # every chunk Complete
    buf[page * PAGE : page * PAGE + 4] = struct.pack("<I", bitmap)
    if page % 5 == 0:
        buf[page * PAGE + 12 : page * PAGE + 14] = struct.pack("<H", rng.randint(1, 32767))
abi = SharedMemoryABI(buf, PAGE)
reader = SharedMemoryReader(abi)
for page in range(-1, PAGES + 1):
    for chunk in range(-1, 16):
        print(page, chunk, reader.read_chunk(page, chunk))
print(sorted(reader.rejected.items()), reader.chunks_read)
abi.close()
print(hashlib.sha256(buf).hexdigest())
"""


def test_compiled_and_pure_readers_take_the_same_chunks_and_leave_the_same_bytes() -> None:
    compiled = run_probe(_PROBE, {}).stdout
    pure = run_probe(_PROBE, {_native.PURE_ENV: "1"}).stdout
    assert "CopiedChunk(" in compiled
    assert compiled == pure


def test_a_closed_abi_reads_nothing() -> None:
    buf = bytearray(4096 * 2)
    abi = SharedMemoryABI(buf, 4096)
    chunk = abi.try_acquire_chunk_in_free_page(1, PageLayout.DIV1, chunk_id=1, writer_id=1)
    assert chunk is not None
    abi.release_chunk_as_complete(chunk)
    reader = SharedMemoryReader(abi)
    abi.close()
    with pytest.raises(SmbError):
        abi.read_and_free_chunk(1, 0)
    assert reader.read_chunk(1, 0) is None
    assert reader.rejected == {"page_out_of_range": 1}


@pytest.mark.parametrize("chunk_idx", [-1, 14, 16, 40])
def test_a_chunk_outside_its_page_is_not_released(chunk_idx: int) -> None:
    buf = bytearray(4096)
    abi = SharedMemoryABI(buf, 4096)
    try:
        buf[0:4] = (0x5000_0001).to_bytes(4, "little")  # Div14, chunk 0 BeingWritten
        stray = Chunk(abi, 0, chunk_idx, 8, abi.chunk_sizes[PageLayout.DIV14])
        with pytest.raises(SmbError):
            abi.release_chunk_as_free(stray)
        with pytest.raises(SmbError):
            abi.release_chunk_as_complete(stray)
        assert abi.relaxed_page_header_bitmap(0) == 0x5000_0001
    finally:
        abi.close()
