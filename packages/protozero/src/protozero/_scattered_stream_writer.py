"""A byte stream written across a sequence of non-contiguous buffers."""

from __future__ import annotations

from typing import Protocol

try:
    import cython
except ImportError:  # installed without Cython: runs as pure Python
    from protozero import _cython_shim as cython

from protozero._errors import ProtozeroError
from protozero._proto_utils import WritableBuffer

if cython.compiled:
    from cython.cimports.cpython.bytes import PyBytes_AS_STRING
    from cython.cimports.libc.string import memcpy, memmove


class ScatteredStreamWriterDelegate(Protocol):
    """Supplies the buffers a `ScatteredStreamWriter` writes into."""

    def get_new_buffer(self) -> tuple[WritableBuffer, int, int]:
        """Next range to write into: (buffer, begin, end); bytes go to buffer[begin:end]."""
        ...


class ScatteredStreamWriter:
    """Writes bytes into the current range and asks its delegate for a new one when it is full.

    `buffer`, `write_ptr` and `end` are plain attributes so that `Message` can write small
    fields straight into the buffer; everything else goes through the methods below.
    """

    __slots__ = (
        "_begin",
        "_delegate",
        "_origin",
        "_view",
        "_written_previously",
        "buffer",
        "end",
        "write_ptr",
    )

    def __init__(self, delegate: ScatteredStreamWriterDelegate) -> None:
        self._delegate = delegate
        self.buffer: WritableBuffer = bytearray()
        self._view: WritableBuffer = self.buffer
        """The same bytes as `buffer` (compiled: a typed memoryview for native stores)."""
        self.write_ptr = 0
        self.end = 0
        self._begin = 0
        self._written_previously = 0
        self._origin = 0
        """`write_ptr - _origin` is `written()`: one subtraction on the hot path."""

    def reset(self, buffer: WritableBuffer, begin: int, end: int) -> None:
        """Starts writing into `buffer[begin:end]`; bytes written so far stay counted."""
        self._written_previously += self.write_ptr - self._begin
        if buffer is not self.buffer:
            self.buffer = buffer
            self._view = buffer
        self.write_ptr = begin
        self.end = end
        self._begin = begin
        self._origin = begin - self._written_previously

    def extend(self) -> None:
        """Moves on to the next range the delegate provides."""
        buffer, begin, end = self._delegate.get_new_buffer()
        if end <= begin:
            raise ProtozeroError(f"delegate returned an empty range [{begin}, {end})")
        self.reset(buffer, begin, end)

    def write_byte(self, value: int) -> None:
        """Appends one byte."""
        if self.write_ptr >= self.end:
            self.extend()
        self._view[self.write_ptr] = value
        self.write_ptr += 1

    def write_bytes(self, data: bytes | bytearray | memoryview) -> None:
        """Appends `data`, spilling into as many new ranges as it needs."""
        p = self.write_ptr
        n = len(data)
        q = p + n
        if q <= self.end:
            if cython.compiled and type(data) is bytes:
                if n:
                    memcpy(cython.address(self._view[p]), PyBytes_AS_STRING(data), n)
            else:
                self.buffer[p:q] = data
            self.write_ptr = q
            return
        view = memoryview(data)
        while view:
            if self.write_ptr >= self.end:
                self.extend()
            p = self.write_ptr
            n = min(self.end - p, len(view))
            self.buffer[p : p + n] = view[:n]
            self.write_ptr = p + n
            view = view[n:]

    def write_size_prefixed(self, data: bytes, min_room: int) -> int:
        """Writes `data` after its size if the current range has room, without extending it.

        The size takes 1 byte below 127, else a 4-byte redundant varint (how a TraceWriter
        frames a whole packet in a chunk). Returns the room left after it, or -1 (nothing
        written) if the range has less than `min_room` bytes or `data` and its size do not fit.
        """
        p = self.write_ptr
        room = self.end - p
        n = len(data)
        if room < min_room or room < n + 4:
            return -1
        if n < 127:
            self._view[p] = n
            p += 1
        else:
            self._view[p] = (n & 0x7F) | 0x80
            self._view[p + 1] = ((n >> 7) & 0x7F) | 0x80
            self._view[p + 2] = ((n >> 14) & 0x7F) | 0x80
            self._view[p + 3] = n >> 21
            p += 4
        if cython.compiled:
            if n:
                memcpy(cython.address(self._view[p]), PyBytes_AS_STRING(data), n)
        else:
            self.buffer[p : p + n] = data
        self.write_ptr = p + n
        return self.end - self.write_ptr

    def reserve_bytes(self, size: int) -> int:
        """Reserves `size` contiguous bytes in one range and returns their offset in `buffer`.

        If they do not fit in the current range the writer moves to a new one first; the
        unused tail of the old range is not counted as written.
        """
        if self.write_ptr + size > self.end:
            self.extend()
            if self.write_ptr + size > self.end:
                raise ProtozeroError(
                    f"cannot reserve {size} contiguous bytes in a range of "
                    f"{self.end - self.write_ptr} bytes"
                )
        p = self.write_ptr
        self.write_ptr = p + size
        return p

    def rewind(self, size: int, offset: int) -> None:
        """Moves the last `size` bytes written back by `offset` bytes (all in the current range)."""
        p = self.write_ptr
        if cython.compiled:
            if size:
                memmove(
                    cython.address(self._view[p - size - offset]),
                    cython.address(self._view[p - size]),
                    size,
                )
        else:
            self.buffer[p - size - offset : p - offset] = self.buffer[p - size : p]
        self.write_ptr = p - offset

    def bytes_available(self) -> int:
        """Bytes that fit in the current range before a new one is needed."""
        return self.end - self.write_ptr

    def written(self) -> int:
        """Total bytes written (including reserved ones) since construction."""
        return self.write_ptr - self._origin
