"""Perfetto's shared memory buffer: ABI, arbiter, TraceWriter and reader."""

from typing import TYPE_CHECKING, Any

from protozero import _native

_native.select_build(__name__)

from perfetto_smb._abi import (
    MAX_WRITER_ID,
    PACKET_SIZE_DROP_PACKET,
    Chunk,
    ChunkFlags,
    ChunkState,
    PageLayout,
    SharedMemoryABI,
)
from perfetto_smb._arbiter import CommitCallback, PostTask, SharedMemoryArbiter
from perfetto_smb._atomics import AtomicWords
from perfetto_smb._errors import SmbError
from perfetto_smb._fragments import (
    PATCH_SIZE,
    ChunkFragments,
    apply_patch,
    is_valid_patch,
    parse_chunk_payload,
)
from perfetto_smb._policy import BufferExhaustedPolicy
from perfetto_smb._reader import CopiedChunk, SharedMemoryReader
from perfetto_smb._region import SharedMemory, ensure_valid_shm_sizes
from perfetto_smb._trace_writer import TraceWriter

__all__ = [
    "MAX_WRITER_ID",
    "PACKET_SIZE_DROP_PACKET",
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
    "PostTask",
    "SharedMemory",
    "SharedMemoryABI",
    "SharedMemoryArbiter",
    "SharedMemoryReader",
    "SmbError",
    "TraceWriter",
    "__version__",
    "apply_patch",
    "ensure_valid_shm_sizes",
    "is_valid_patch",
    "parse_chunk_payload",
]

_native.report(__name__)


if TYPE_CHECKING:
    __version__: str
else:

    def __getattr__(name: str) -> Any:
        if name != "__version__":
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        from importlib.metadata import version  # costs as much as the package: only when asked

        globals()["__version__"] = value = version("perfetto-smb")
        return value
