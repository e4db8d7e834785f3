"""The compiled SharedMemoryArbiter against the pure one: same chunks, commits and bytes."""

from __future__ import annotations

from protozero import _native
from smb_testlib import run_probe

# Takes chunks out of seeded SMBs (free pages, partitioned pages with chunks in every state,
# reserved layouts) with every layout, in the build the environment picks, returns some with
# patches, and prints each chunk, each commit request and what the buffer holds after.
_PROBE = """
import collections, hashlib, random, struct
from perfetto_smb import BufferExhaustedPolicy, PageLayout, SharedMemoryArbiter
from perfetto_smb._patch_list import Patch

PAGE, PAGES = 4096, 16
for emulation in (False, True):
    for layout in range(PageLayout.DIV1, PageLayout.DIV14 + 1):
        rng = random.Random(layout)
        buf = bytearray(PAGE * PAGES)
        for page in range(PAGES):
            if page % 3:
                continue
            bitmap = ((page // 3 % 8) << 28) | rng.getrandbits(28)
            buf[page * PAGE : page * PAGE + 4] = struct.pack("<I", bitmap)
        commits = []

        def commit(request, done):
            commits.append(request.SerializeToString().hex())

        arbiter = SharedMemoryArbiter(
            buf, PAGE, commit, emulation=emulation, page_layout=PageLayout(layout)
        )
        patches = collections.deque()
        chunk_id = 0
        while True:
            chunk = arbiter.get_new_chunk(
                7, chunk_id, chunk_id % 3, chunk_id % 8, BufferExhaustedPolicy.DROP
            )
            if chunk is None:
                break
            print(layout, chunk, chunk.begin, chunk.chunk_id, chunk.packet_count_and_flags())
            buf[chunk.payload_begin : chunk.end] = rng.randbytes(chunk.payload_size)
            patch = Patch(chunk_id, rng.randrange(chunk.payload_size - 4))
            if chunk_id % 2:
                patch.size_field[:] = rng.randbytes(3) + b"\\x01"
            patches.append(patch)
            if chunk_id % 4 != 3:
                arbiter.return_completed_chunk(chunk, 1 + chunk_id % 2, patches)
            if chunk_id % 5 == 0:
                for patch in patches:
                    patch.size_field[0] = 0x80
                arbiter.send_patches(7, 2, patches)
            if chunk_id % 6 == 0:
                arbiter.flush_pending_commit_data_requests()
            chunk_id += 1
        arbiter.flush_pending_commit_data_requests()
        print(len(patches), *commits, sep="\\n")
        arbiter.close()
        print(hashlib.sha256(buf).hexdigest())
"""


def test_compiled_and_pure_arbiters_take_the_same_chunks_and_commit_the_same_bytes() -> None:
    compiled = run_probe(_PROBE, {}).stdout
    pure = run_probe(_PROBE, {_native.PURE_ENV: "1"}).stdout
    assert "Chunk(" in compiled
    assert compiled == pure
