"""Shared memory regions: a sealed memfd (or an unlinked temp file) mapped read-write."""

from __future__ import annotations

import fcntl
import mmap
import os
import tempfile
from types import TracebackType

from perfetto_smb._errors import SmbError

MIN_PAGE_SIZE = 4096
"""The smallest SMB page (ABI)."""
MAX_ABI_PAGE_SIZE = 64 * 1024
"""The largest page the ABI can describe."""
MAX_SERVICE_PAGE_SIZE = 32 * 1024
"""The largest page the service accepts (larger requests are clamped to it)."""
DEFAULT_PAGE_SIZE = 4096
"""Page size used when none (or an invalid one) is given."""
DEFAULT_SHM_SIZE = 256 * 1024
"""Buffer size used when none (or an invalid one) is given."""
MAX_SHM_SIZE = 32 * 1024 * 1024
"""The largest buffer the service creates (larger requests are clamped to it)."""

_SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL


def ensure_valid_shm_sizes(size: int, page_size: int) -> tuple[int, int]:
    """The (buffer size, page size) the service uses for the requested ones.

    0 means the default. The page is clamped to 32 KiB and the buffer to 32 MiB; then a page
    that is not 4 KiB times a power of two, or a buffer smaller than a page or not a multiple
    of it, gives the defaults (256 KiB, 4 KiB).
    """
    if page_size == 0:
        page_size = DEFAULT_PAGE_SIZE
    if size == 0:
        size = DEFAULT_SHM_SIZE
    page_size = min(page_size, MAX_SERVICE_PAGE_SIZE)
    size = min(size, MAX_SHM_SIZE)
    pages_of_4k = page_size // MIN_PAGE_SIZE
    valid = (
        page_size >= MIN_PAGE_SIZE
        and page_size % MIN_PAGE_SIZE == 0
        and pages_of_4k & (pages_of_4k - 1) == 0
        and size >= page_size
        and size % page_size == 0
    )
    if not valid:
        return DEFAULT_SHM_SIZE, DEFAULT_PAGE_SIZE
    return size, page_size


def is_valid_page_size(page_size: int) -> bool:
    """Whether the ABI can describe pages of `page_size` bytes (4-64 KiB in 4 KiB steps)."""
    return MIN_PAGE_SIZE <= page_size <= MAX_ABI_PAGE_SIZE and page_size % MIN_PAGE_SIZE == 0


class SharedMemory:
    """A file-backed memory region mapped shared and read-write, with its descriptor.

    Create one with `create()` or map a received descriptor with `attach()`. The mapping is
    page aligned, so it is a valid SMB start. Close it when done (or use it as a context
    manager); closing fails while an ABI or writer still holds the mapping.
    """

    __slots__ = ("_fd", "_map", "_sealed", "_size")

    def __init__(self, fd: int, size: int, *, sealed: bool) -> None:
        """Maps `size` bytes of `fd`, taking ownership of the descriptor."""
        if size <= 0:
            raise SmbError(f"shared memory size must be positive, got {size}")
        try:
            self._map = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except (OSError, ValueError) as e:
            os.close(fd)
            raise SmbError(f"cannot map {size} bytes of fd {fd}: {e}") from e
        self._fd: int = fd
        self._size = size
        self._sealed = sealed

    @classmethod
    def create(cls, size: int, name: str = "perfetto_shmem") -> SharedMemory:
        """A new zero-filled region of `size` bytes.

        A memfd named `name`, sealed against shrinking, growing and further sealing where the
        kernel allows it; otherwise an unlinked temporary file.
        """
        if size <= 0:
            raise SmbError(f"shared memory size must be positive, got {size}")
        fd, sealed = _create_memfd(name, size)
        if fd < 0:
            fd = _create_tempfile(size)
        return cls(fd, size, sealed=sealed)

    @classmethod
    def attach(cls, fd: int, size: int | None = None) -> SharedMemory:
        """Maps a region received as a descriptor (taking ownership of `fd`).

        `size` defaults to the file's size; a size beyond the file's end is an error.
        """
        try:
            file_size = os.fstat(fd).st_size
        except OSError as e:
            raise SmbError(f"cannot attach fd {fd}: {e}") from e
        if size is None:
            size = file_size
        if size <= 0 or size > file_size:
            os.close(fd)
            raise SmbError(f"cannot attach {size} bytes of fd {fd} holding {file_size} bytes")
        return cls(fd, size, sealed=_has_all_seals(fd))

    @property
    def fd(self) -> int:
        """The region's file descriptor (to send to the peer); -1 once closed."""
        return self._fd

    @property
    def size(self) -> int:
        """Size of the mapping in bytes."""
        return self._size

    @property
    def buffer(self) -> mmap.mmap:
        """The mapped bytes."""
        return self._map

    @property
    def sealed(self) -> bool:
        """Whether the file is a memfd sealed against shrink, grow and seal."""
        return self._sealed

    @property
    def closed(self) -> bool:
        """Whether close() has run."""
        return self._fd < 0

    def close(self) -> None:
        """Unmaps the region and closes its descriptor."""
        if self._fd < 0:
            return
        try:
            self._map.close()
        except BufferError as e:
            raise SmbError("shared memory still in use (close its ABI and writers first)") from e
        os.close(self._fd)
        self._fd = -1

    def __enter__(self) -> SharedMemory:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _create_memfd(name: str, size: int) -> tuple[int, bool]:
    memfd_create = getattr(os, "memfd_create", None)
    if memfd_create is None:
        return -1, False
    try:
        fd: int = memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    except OSError:
        return -1, False
    try:
        os.ftruncate(fd, size)
    except OSError as e:
        os.close(fd)
        raise SmbError(f"cannot size shared memory to {size} bytes: {e}") from e
    try:
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _SEALS)
    except OSError:
        return fd, False
    return fd, True


def _create_tempfile(size: int) -> int:
    try:
        fd, path = tempfile.mkstemp(prefix="perfetto-shmem-")
    except OSError as e:
        raise SmbError(f"cannot create shared memory: {e}") from e
    os.unlink(path)
    try:
        os.ftruncate(fd, size)
    except OSError as e:
        os.close(fd)
        raise SmbError(f"cannot size shared memory to {size} bytes: {e}") from e
    return fd


def _has_all_seals(fd: int) -> bool:
    try:
        seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
    except OSError:
        return False
    return seals & _SEALS == _SEALS
