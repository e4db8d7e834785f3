"""The trace buffer's chunk index, pure: a dict from key to slot over growing arrays.

Same interface as `_chunk_index` (the compiled build's open-addressed table), which a
property test checks: slots are numbered in the order they were first needed and reused
once freed, so they never move.
"""

from __future__ import annotations

import array
from typing import Any


class ChunkIndex:
    """Chunk slots by key; slots never move.

    `props` and `seqs` hold an entry per slot, used or not: slot numbers are below their
    length. A free slot's `seqs` entry is None once the caller cleared it.
    """

    __slots__ = ("_empty", "_free", "_slot_of", "fields", "keys", "props", "seqs")

    def __init__(self, stride: int) -> None:
        self._empty = bytes(8 * stride)
        self._slot_of: dict[int, int] = {}
        self._free: list[int] = []
        self.keys: array.array[int] = array.array("Q")
        self.fields: array.array[int] = array.array("q")
        self.props: list[Any] = []
        self.seqs: list[Any] = []

    def find(self, key: int) -> int:
        """The slot of the chunk with `key`, or -1 if it is not in the index."""
        return self._slot_of.get(key, -1)

    def insert(self, key: int) -> int:
        """Adds `key` (not in the index) and returns its slot; the caller fills its fields."""
        if self._free:
            slot = self._free.pop()
            self.keys[slot] = key
        else:
            slot = len(self.keys)
            self.keys.append(key)
            self.fields.frombytes(self._empty)
            self.props.append(None)
            self.seqs.append(None)
        self._slot_of[key] = slot
        return slot

    def remove(self, slot: int) -> None:
        """Frees a used slot; its `props` and `seqs` entries are left to the caller."""
        del self._slot_of[self.keys[slot]]
        self._free.append(slot)

    def copy(self) -> ChunkIndex:
        """An index with the same slots (the `props` and `seqs` lists copied, not their items)."""
        other = ChunkIndex(0)
        other._empty = self._empty
        other._slot_of = dict(self._slot_of)
        other._free = list(self._free)
        other.keys = array.array("Q", self.keys)
        other.fields = array.array("q", self.fields)
        other.props = list(self.props)
        other.seqs = list(self.seqs)
        return other
