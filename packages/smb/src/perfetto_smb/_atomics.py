"""Hardware atomic operations on 32-bit words of a shared buffer.

Compiled, they are the compiler's `__atomic` builtins; as pure Python, libatomic's functions
called through ctypes (`libatomic.so.1`, Debian/Ubuntu package `libatomic1`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import mmap
from collections.abc import Callable

try:
    import cython
except ImportError:  # installed without Cython: runs as pure Python
    from protozero import _cython_shim as cython

from perfetto_smb._errors import SmbError

if cython.compiled:
    from cython.cimports.perfetto_smb._c_atomics import cas32, load32, store32

# GCC's memory-order constants, as libatomic takes them.
_ACQUIRE = 2
_RELEASE = 3
_ACQ_REL = 4

_CasFunction = Callable[[ctypes.c_void_p, object, int, int, int], bool]
_LoadFunction = Callable[[ctypes.c_void_p, int], int]
_StoreFunction = Callable[[ctypes.c_void_p, int, int], None]

_SIGN_BIT = 1 << 31
_WORD_RANGE = 1 << 32

WordPointer = ctypes.c_void_p
"""What `AtomicWords.pointer()` returns: a ctypes pointer (pure Python; compiled: the offset)."""
_NO_BYTES = bytearray(4)


@functools.cache
def _load_backend() -> tuple[_CasFunction, _LoadFunction, _StoreFunction]:
    names = ["libatomic.so.1", ctypes.util.find_library("atomic")]
    lib: ctypes.CDLL | None = None
    for name in names:
        if not name:
            continue
        try:
            lib = ctypes.CDLL(name)
            break
        except OSError:
            continue
    if lib is None:
        raise SmbError(
            "libatomic.so.1 could not be loaded: install the libatomic1 package "
            "(e.g. `apt-get install libatomic1`)"
        )
    # No argtypes: every call passes ready-made c_void_p objects and C ints, which ctypes
    # hands over as they are (converting through argtypes costs a microsecond per call).
    cas = lib.__atomic_compare_exchange_4
    cas.restype = ctypes.c_bool
    load = lib.__atomic_load_4
    load.restype = ctypes.c_uint32
    store = lib.__atomic_store_4
    store.restype = None
    return (cas, load, store)


def _as_c_int(value: int) -> int:
    """The C int with the bit pattern of the 32-bit word `value`."""
    value &= 0xFFFFFFFF
    return value - _WORD_RANGE if value >= _SIGN_BIT else value


class AtomicWords:
    """Atomic load, store and compare-and-swap on the aligned 32-bit words of a buffer.

    The operations are the CPU's own (lock cmpxchg on x86-64), so they synchronize with any
    other process that maps the same memory, whatever its language. While this object is
    open the buffer cannot be closed or resized (it holds an export of it).
    """

    __slots__ = (
        "_anchor",
        "_base",
        "_bytes",
        "_cas",
        "_limit",
        "_load",
        "_pointers",
        "_store",
    )

    def __init__(self, buffer: mmap.mmap | bytearray) -> None:
        if len(buffer) < 4:
            raise SmbError(f"buffer of {len(buffer)} bytes holds no 32-bit word")
        self._limit = len(buffer) - 4
        # Pointers to the words used so far, by offset (checked once, when made).
        self._pointers: dict[int, ctypes.c_void_p] = {}
        self._anchor: ctypes.Array[ctypes.c_char] | None = None
        if cython.compiled:
            self._bytes = buffer
            if cython.cast(cython.size_t, cython.address(self._bytes[0])) % 4:
                raise SmbError("buffer is not 4-byte aligned")
            return
        self._cas, self._load, self._store = _load_backend()
        anchor = (ctypes.c_char * len(buffer)).from_buffer(buffer)
        self._anchor = anchor
        self._base = ctypes.addressof(anchor)
        if self._base % 4:
            raise SmbError("buffer is not 4-byte aligned")

    def _check(self, offset: int) -> None:
        if self._limit < 0:
            raise SmbError("atomic access to a closed buffer")
        if offset < 0 or offset > self._limit or offset & 3:
            raise SmbError(f"atomic access at offset {offset} outside the buffer or unaligned")

    def pointer(self, offset: int) -> WordPointer:
        """A pointer to the word at `offset`, for `compare_exchange_at`; checked and cached."""
        if cython.compiled:
            self._check(offset)
            compiled_pointer: ctypes.c_void_p = cython.cast(cython.Py_ssize_t, offset)
            return compiled_pointer
        pointer = self._pointers.get(offset)
        if pointer is None:
            self._check(offset)
            pointer = self._pointers[offset] = ctypes.c_void_p(self._base + offset)
        return pointer

    def load(self, offset: int) -> int:
        """Loads the word at `offset` with acquire ordering."""
        if cython.compiled:
            self._check(offset)
            word: int = load32(cython.address(self._bytes[offset]))
            return word
        return self._load(self.pointer(offset), _ACQUIRE)

    def store(self, offset: int, value: int) -> None:
        """Stores `value` into the word at `offset` with release ordering."""
        if cython.compiled:
            self._check(offset)
            store32(cython.address(self._bytes[offset]), value & 0xFFFFFFFF)
            return
        self._store(self.pointer(offset), _as_c_int(value), _RELEASE)

    def compare_exchange(self, offset: int, expected: int, desired: int) -> int:
        """Sets the word to `desired` if it equals `expected` (acq_rel); returns the old value.

        The swap happened if and only if the returned value equals `expected`.
        """
        return self.compare_exchange_at(self.pointer(offset), expected, desired)

    def compare_exchange_at(self, pointer: WordPointer, expected: int, desired: int) -> int:
        """`compare_exchange` on the word `pointer` (from `pointer()`) points to."""
        if cython.compiled:
            if self._limit < 0:
                raise SmbError("atomic access to a closed buffer")
            at = cython.address(self._bytes[cython.cast(cython.Py_ssize_t, pointer)])
            found: int = cas32(at, expected & 0xFFFFFFFF, desired & 0xFFFFFFFF)
            return found
        cell = ctypes.c_uint32(expected)
        desired &= 0xFFFFFFFF
        as_c_int = desired - ((desired >> 31) << 32)  # the C int with the word's bit pattern
        self._cas(pointer, ctypes.byref(cell), as_c_int, _ACQ_REL, _ACQUIRE)
        return cell.value

    def close(self) -> None:
        """Releases the buffer; later operations raise SmbError."""
        self._pointers.clear()
        self._anchor = None
        self._limit = -1
        if cython.compiled:
            self._bytes = _NO_BYTES
