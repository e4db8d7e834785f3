"""Messages written into growable heap memory, for tests and small uses."""

from __future__ import annotations

from typing import Generic, TypeVar

from protozero._errors import ProtozeroError
from protozero._message import Message
from protozero._proto_utils import WritableBuffer
from protozero._scattered_stream_writer import ScatteredStreamWriter

M = TypeVar("M", bound=Message)

DEFAULT_INITIAL_SLICE_SIZE = 128
DEFAULT_MAXIMUM_SLICE_SIZE = 128 * 1024


class ScatteredHeapBuffer:
    """A `ScatteredStreamWriterDelegate` that hands out heap slices of growing size."""

    __slots__ = ("_maximum_slice_size", "_next_size", "_slices", "_used", "_writer")

    def __init__(
        self,
        initial_slice_size: int = DEFAULT_INITIAL_SLICE_SIZE,
        maximum_slice_size: int = DEFAULT_MAXIMUM_SLICE_SIZE,
    ) -> None:
        if not 0 < initial_slice_size <= maximum_slice_size:
            raise ProtozeroError(
                f"slice sizes must satisfy 0 < initial ({initial_slice_size}) "
                f"<= maximum ({maximum_slice_size})"
            )
        self._maximum_slice_size = maximum_slice_size
        self._next_size = initial_slice_size
        self._slices: list[bytearray] = []
        self._used: list[int] = []
        self._writer: ScatteredStreamWriter | None = None

    def set_writer(self, writer: ScatteredStreamWriter) -> None:
        """The writer whose position tells how much of the last slice is used."""
        self._writer = writer

    def get_new_buffer(self) -> tuple[WritableBuffer, int, int]:
        """A new slice, twice the size of the previous one up to the maximum."""
        self._close_last_slice()
        size = self._next_size
        self._next_size = min(size * 2, self._maximum_slice_size)
        buf = bytearray(size)
        self._slices.append(buf)
        self._used.append(-1)
        # Written through a memoryview: slice stores into a bytearray cost about twice as much.
        return memoryview(buf), 0, size

    def _close_last_slice(self) -> None:
        if self._slices and self._writer is not None and self._used[-1] < 0:
            self._used[-1] = self._writer.write_ptr

    def stitch(self) -> bytes:
        """Everything written so far, as one bytes object."""
        self._close_last_slice()
        return b"".join(memoryview(s)[:u] for s, u in zip(self._slices, self._used, strict=True))

    def slices(self) -> list[memoryview]:
        """The used part of each slice, in order, without copying."""
        self._close_last_slice()
        return [memoryview(s)[:u] for s, u in zip(self._slices, self._used, strict=True)]


class HeapBuffered(Generic[M]):
    """A root message of type `M` over a `ScatteredHeapBuffer`, e.g. `HeapBuffered(TracePacket)`."""

    __slots__ = ("_buffer", "_cls", "_writer", "msg")

    def __init__(
        self,
        cls: type[M],
        initial_slice_size: int = DEFAULT_INITIAL_SLICE_SIZE,
        maximum_slice_size: int = DEFAULT_MAXIMUM_SLICE_SIZE,
    ) -> None:
        self._cls = cls
        self._buffer = ScatteredHeapBuffer(initial_slice_size, maximum_slice_size)
        self._writer = ScatteredStreamWriter(self._buffer)
        self._buffer.set_writer(self._writer)
        self.msg: M = cls()
        self.msg.reset(self._writer)

    def get(self) -> M:
        """The root message."""
        return self.msg

    def serialize(self) -> bytes:
        """Finalizes the message and returns its bytes."""
        self.msg.finalize()
        return self._buffer.stitch()

    def slices(self) -> list[memoryview]:
        """Finalizes the message and returns its bytes as the heap slices that hold them."""
        self.msg.finalize()
        return self._buffer.slices()
