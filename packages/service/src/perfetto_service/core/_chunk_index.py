"""The trace buffer's chunk index, compiled: an open-addressed table of C integers.

Each chunk a `TraceBuffer` holds has a slot: its key (producer, writer and chunk id packed in
64 bits) in `keys`, `stride` integer fields in `fields` (the buffer's to use), its packet
sequence properties in `props` and its sequence in `seqs`. The table is probed in C
(Fibonacci hashing, linear probing, tombstones); slots move only when `insert` rehashes it.
The pure build uses `_chunk_index_pure`, which has the same interface; a property test
drives both with the same operations.
"""

from __future__ import annotations

import array
from typing import Any

_EMPTY = 0
_USED = 1
_TOMBSTONE = 2
_MIN_CAPACITY = 256
_GOLDEN = 0x9E3779B97F4A7C15
"""Fibonacci hashing's multiplier: the top bits of key * _GOLDEN pick a key's first slot."""
_U64 = 0xFFFFFFFFFFFFFFFF
"""The product wraps at 64 bits (compiled, by itself: the mask costs nothing)."""


class ChunkIndex:
    """Chunk slots by key; `insert` may move every slot (rehash), `find` and `remove` do not.

    `props` and `seqs` hold an entry per slot, used or not: slot numbers are below their
    length. A free slot's `seqs` entry is None once the caller cleared it.
    """

    __slots__ = (
        "_capacity",
        "_fields",
        "_keys",
        "_live",
        "_shift",
        "_states",
        "_stride",
        "_tombstones",
        "fields",
        "keys",
        "props",
        "seqs",
        "states",
    )

    def __init__(self, stride: int) -> None:
        self._stride = stride
        self._live = 0
        self._allocate(_MIN_CAPACITY)

    def _allocate(self, capacity: int) -> None:
        """Replaces the table by an empty one of `capacity` slots, a power of 2."""
        self._keys = array.array("Q", bytes(8 * capacity))
        self.keys = self._keys
        self._fields = array.array("q", bytes(8 * self._stride * capacity))
        self.fields = self._fields
        self._states = bytearray(capacity)
        self.states = self._states
        self.props: list[Any] = [None] * capacity
        self.seqs: list[Any] = [None] * capacity
        self._capacity = capacity
        self._shift = 65 - capacity.bit_length()
        self._tombstones = 0

    def _home(self, key: int) -> int:
        """The first slot probed for `key`."""
        return ((key * _GOLDEN) & _U64) >> self._shift

    def find(self, key: int) -> int:
        """The slot of the chunk with `key`, or -1 if it is not in the index."""
        mask = self._capacity - 1
        slot = self._home(key)
        while True:
            state = self.states[slot]
            if state == _EMPTY:
                return -1
            if state == _USED and self.keys[slot] == key:
                return slot
            slot = (slot + 1) & mask

    def insert(self, key: int) -> int:
        """Adds `key` (not in the index) and returns its slot; the caller fills its fields."""
        if (self._live + self._tombstones + 1) * 2 > self._capacity:
            grow = (self._live + 1) * 4 > self._capacity
            self._rehash(self._capacity * 2 if grow else self._capacity)
        mask = self._capacity - 1
        slot = self._home(key)
        while self.states[slot] == _USED:
            slot = (slot + 1) & mask
        if self.states[slot] == _TOMBSTONE:
            self._tombstones -= 1
        self.states[slot] = _USED
        self.keys[slot] = key
        self._live += 1
        return slot

    def remove(self, slot: int) -> None:
        """Frees a used slot; its `props` and `seqs` entries are left to the caller."""
        self.states[slot] = _TOMBSTONE
        self._tombstones += 1
        self._live -= 1

    def _rehash(self, capacity: int) -> None:
        """Moves every used slot into a new table of `capacity` slots, no tombstones."""
        old_keys = self.keys
        old_fields = self.fields
        old_states = self.states
        old_props = self.props
        old_seqs = self.seqs
        old_capacity = self._capacity
        stride = self._stride
        self._allocate(capacity)
        keys = self.keys
        fields = self.fields
        states = self.states
        mask = capacity - 1
        for old in range(old_capacity):
            if old_states[old] != _USED:
                continue
            key = old_keys[old]
            slot = self._home(key)
            while states[slot]:
                slot = (slot + 1) & mask
            states[slot] = _USED
            keys[slot] = key
            self.props[slot] = old_props[old]
            self.seqs[slot] = old_seqs[old]
            for field in range(stride):
                fields[slot * stride + field] = old_fields[old * stride + field]

    def copy(self) -> ChunkIndex:
        """An index with the same slots (the `props` and `seqs` lists copied, not their items)."""
        other = ChunkIndex(self._stride)
        other._keys = array.array("Q", self._keys)
        other.keys = other._keys
        other._fields = array.array("q", self._fields)
        other.fields = other._fields
        other._states = bytearray(self._states)
        other.states = other._states
        other.props = list(self.props)
        other.seqs = list(self.seqs)
        other._capacity = self._capacity
        other._shift = self._shift
        other._live = self._live
        other._tombstones = self._tombstones
        return other
