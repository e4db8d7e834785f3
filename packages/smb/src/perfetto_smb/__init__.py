"""Perfetto's shared memory buffer: ABI, arbiter, TraceWriter and reader."""

from importlib.metadata import version as _version

from protozero import _native

_native.select_build(__name__)

from perfetto_smb._abi import (
    CHUNK_HEADER_SIZE,
    MAX_CHUNK_ID,
    MAX_CHUNKS_PER_PAGE,
    MAX_PACKET_COUNT,
    MAX_WRITER_ID,
    NUM_CHUNKS_FOR_LAYOUT,
    PACKET_HEADER_SIZE,
    PACKET_SIZE_DROP_PACKET,
    PAGE_HEADER_SIZE,
    Chunk,
    ChunkFlags,
    ChunkState,
    PageLayout,
    SharedMemoryABI,
    chunk_size_for_layout,
    chunk_state_from_bitmap,
    layout_from_bitmap,
    num_chunks_from_bitmap,
    pack_chunk_header,
    unpack_chunk_header,
    used_chunks_from_bitmap,
)
from perfetto_smb._arbiter import (
    CommitCallback,
    PostTask,
    SharedMemoryArbiter,
    WriterIdAllocator,
)
from perfetto_smb._atomics import AtomicWords
from perfetto_smb._errors import SmbError
from perfetto_smb._fragments import (
    MAX_PATCHES_PER_CHUNK_TO_PATCH,
    PATCH_SIZE,
    ChunkFragments,
    apply_patch,
    is_valid_patch,
    parse_chunk_payload,
    read_fragment_size,
)
from perfetto_smb._patch_list import Patch
from perfetto_smb._policy import BufferExhaustedPolicy
from perfetto_smb._reader import CopiedChunk, SharedMemoryReader
from perfetto_smb._region import (
    DEFAULT_PAGE_SIZE,
    DEFAULT_SHM_SIZE,
    MAX_SHM_SIZE,
    SharedMemory,
    ensure_valid_shm_sizes,
    is_valid_page_size,
)
from perfetto_smb._trace_writer import TraceWriter

__version__: str = _version("perfetto-smb")

__all__ = [
    "CHUNK_HEADER_SIZE",
    "DEFAULT_PAGE_SIZE",
    "DEFAULT_SHM_SIZE",
    "MAX_CHUNKS_PER_PAGE",
    "MAX_CHUNK_ID",
    "MAX_PACKET_COUNT",
    "MAX_PATCHES_PER_CHUNK_TO_PATCH",
    "MAX_SHM_SIZE",
    "MAX_WRITER_ID",
    "NUM_CHUNKS_FOR_LAYOUT",
    "PACKET_HEADER_SIZE",
    "PACKET_SIZE_DROP_PACKET",
    "PAGE_HEADER_SIZE",
    "PATCH_SIZE",
    "AtomicWords",
    "BufferExhaustedPolicy",
    "Chunk",
    "ChunkFlags",
    "ChunkFragments",
    "ChunkState",
    "CommitCallback",
    "CopiedChunk",
    "PageLayout",
    "Patch",
    "PostTask",
    "SharedMemory",
    "SharedMemoryABI",
    "SharedMemoryArbiter",
    "SharedMemoryReader",
    "SmbError",
    "TraceWriter",
    "WriterIdAllocator",
    "__version__",
    "apply_patch",
    "chunk_size_for_layout",
    "chunk_state_from_bitmap",
    "ensure_valid_shm_sizes",
    "is_valid_page_size",
    "is_valid_patch",
    "layout_from_bitmap",
    "num_chunks_from_bitmap",
    "pack_chunk_header",
    "parse_chunk_payload",
    "read_fragment_size",
    "unpack_chunk_header",
    "used_chunks_from_bitmap",
]

_native.report(__name__)
