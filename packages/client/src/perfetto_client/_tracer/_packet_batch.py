# cython: language_level=3, binding=False, boundscheck=False, wraparound=False
# cython: initializedcheck=False, annotation_typing=False
"""The compiled build's batch of TracePackets: a malloc'd buffer written through C pointers.

A `ThreadRecorder` writes each TrackEvent of its thread into its batch (`write`) and hands the
bytes over (`data`) when the batch is full; `start` begins the next one with the engine's
prologue. Every packet is framed as `Trace.packet` and carries its timestamp as a delta on
the sequence's incremental clock (CLOCK_BOOTTIME, `now_ns` in `_packet_batch.pxd`).
`_packet_batch_pure` is the pure build's, with the same interface and the same bytes; a
property test drives both with the same operations. Compiled only: the module works on C
pointers and does not run as Python.
"""

from __future__ import annotations

from typing import Any

try:
    import cython
except ImportError:  # installed without Cython: runs as pure Python
    from protozero import _cython_shim as cython

if cython.compiled:  # write_interned_event: _packet_batch.pxd, where other modules inline it
    from cython.cimports.libc.stdlib import free, malloc, realloc
    from cython.cimports.libc.string import memcpy

__all__ = ["PacketBatch"]

_SLACK = 65536
"""Room kept beyond a full batch, so that a packet rarely needs the buffer to grow."""


class PacketBatch:
    """A thread's packets being batched (see the module's docstring).

    `seq` is the encoded `trusted_packet_sequence_id` field that ends every packet; a batch
    is full once `pos` reaches the size the recorder chose (`size`), and grows as needed.
    """

    def __init__(self, seq: bytes, size: int) -> None:
        if len(seq) > 8:
            raise ValueError("sequence id field too long")
        self.seq_len = len(seq)
        memcpy(self.seq, cython.cast(cython.p_char, seq), self.seq_len)  # type: ignore[attr-defined]
        self.cap = size + _SLACK
        self.buf: Any = cython.cast(cython.p_uchar, malloc(self.cap))
        if self.buf == cython.NULL:
            raise MemoryError()
        self.pos = 0
        self.last_ts = 0

    def __dealloc__(self) -> None:
        free(self.buf)

    def start(self, prologue: bytes, ts: int) -> None:
        """Empties the batch and opens it with `prologue`; deltas count from `ts`."""
        self.pos = 0
        self._reserve(len(prologue))
        memcpy(self.buf, cython.cast(cython.p_char, prologue), len(prologue))
        self.pos = len(prologue)
        self.last_ts = ts

    def write(self, kind: int, iid: int, ts: int, location: bool, blob: bytes) -> int:
        """Appends a TrackEvent of type `kind` at `ts`: named by `iid` unless 0, its source
        location (`iid` too) if `location` and a slice begins, and `blob` (the iid's
        InternedData, or empty) as the packet's interned data."""
        return write_interned_event(  # type: ignore[name-defined,no-any-return] # noqa: F821
            self, kind, iid, ts, location, blob
        )

    def data(self) -> bytes:
        """The batch's bytes: its packets, framed as a Trace."""
        return cython.cast(cython.p_char, self.buf)[: self.pos]  # type: ignore[no-any-return]

    def clear(self) -> None:
        """Drops the batch's bytes."""
        self.pos = 0

    def _reserve(self, n: int) -> int:
        # Room for n more bytes.
        if self.pos + n <= self.cap:
            return 0
        grown = cython.cast(cython.p_uchar, realloc(self.buf, self.pos + n + _SLACK))
        if grown == cython.NULL:
            raise MemoryError()
        self.buf = grown
        self.cap = self.pos + n + _SLACK
        return 0
