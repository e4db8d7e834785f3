"""The trace buffer's two chunk indexes (compiled build's table, pure build's dict) agree.

Both are driven with the same operations, as a `TraceBuffer` uses them, and compared after
each: which keys they find, and each found slot's key, fields, properties and sequence.
Compiled, `_chunk_index` is its compiled module; pure, its `.py` runs as Python.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from perfetto_service.core import _chunk_index, _chunk_index_pure

STRIDE = 7
_SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])

_Index = _chunk_index.ChunkIndex | _chunk_index_pure.ChunkIndex


def _key(producer: int, writer: int, chunk_id: int) -> int:
    return (producer << 48) | (writer << 32) | chunk_id


def _fields_of(key: int) -> list[int]:
    """Field values a buffer might store for the chunk `key` (negative and 64-bit ones too)."""
    return [(key * (i + 3)) % (1 << 63) - (1 << 62) * (i % 2) for i in range(STRIDE)]


_inserts = st.tuples(
    st.just("insert"),
    st.sampled_from([0, 1, 0xFFFF]),
    st.sampled_from([1, 2, 0xFFFF]),
    st.sampled_from([0, 5, 0xFFFFFF00, 0xFFFFFFFF]),
    st.integers(1, 200),
)
_removes = st.tuples(st.just("remove"), st.integers(0, 1 << 16), st.integers(1, 150))
_copies = st.tuples(st.just("copy"))
_operations = st.lists(st.one_of(_inserts, _inserts, _removes, _copies), max_size=12)


def _insert(index: _Index, key: int) -> None:
    slot = index.insert(key)
    assert 0 <= slot < len(index.seqs)
    fields = index.fields
    for i, value in enumerate(_fields_of(key)):
        fields[slot * STRIDE + i] = value
    index.props[slot] = ("props", key)
    index.seqs[slot] = ("seq", key >> 32)


def _remove(index: _Index, key: int) -> None:
    slot = index.find(key)
    index.remove(slot)
    index.props[slot] = None
    index.seqs[slot] = None


def _slot_contents(index: _Index, key: int) -> tuple[int, list[int], Any, Any] | None:
    slot = index.find(key)
    if slot < 0:
        return None
    fields = index.fields
    return (
        index.keys[slot],
        [fields[slot * STRIDE + i] for i in range(STRIDE)],
        index.props[slot],
        index.seqs[slot],
    )


def _live_keys(index: _Index) -> set[int]:
    """The keys of the slots a buffer's walk over every slot visits (`seqs` not None)."""
    return {index.keys[s] for s in range(len(index.seqs)) if index.seqs[s] is not None}


@_SETTINGS
@given(operations=_operations, probes=st.lists(st.integers(0, (1 << 64) - 1), max_size=5))
def test_both_indexes_hold_the_same_chunks_after_the_same_operations(
    operations: list[tuple[Any, ...]], probes: list[int]
) -> None:
    table: _Index = _chunk_index.ChunkIndex(STRIDE)
    mapping: _Index = _chunk_index_pure.ChunkIndex(STRIDE)
    live: list[int] = []
    gone: set[int] = set()
    for operation in operations:
        if operation[0] == "insert":
            _, producer, writer, first, count = operation
            for n in range(count):
                key = _key(producer, writer, (first + n) & 0xFFFFFFFF)
                if key in live:
                    continue
                for index in (table, mapping):
                    assert index.find(key) == -1
                    _insert(index, key)
                live.append(key)
                gone.discard(key)
        elif operation[0] == "remove":
            _, start, count = operation
            for _ in range(min(count, len(live))):
                key = live.pop(start % len(live))
                for index in (table, mapping):
                    _remove(index, key)
                gone.add(key)
        else:
            copies = table.copy(), mapping.copy()
            # A copy is independent: changing the original leaves it as it was.
            for index in (table, mapping):
                for slot in range(len(index.seqs)):
                    index.props[slot] = "changed"
                    index.fields[slot * STRIDE] = -1
                index.insert(_key(9, 9, 9))
            table, mapping = copies
        for key in live:
            expected = (key, _fields_of(key), ("props", key), ("seq", key >> 32))
            assert _slot_contents(table, key) == expected
            assert _slot_contents(mapping, key) == expected
        for key in [*gone, *probes]:
            if key not in live:
                assert table.find(key) == -1
                assert mapping.find(key) == -1
        assert _live_keys(table) == _live_keys(mapping) == set(live)


def test_the_table_grows_and_reuses_removed_slots() -> None:
    """Enough chunks to rehash the table several times, then churn through removals."""
    table = _chunk_index.ChunkIndex(STRIDE)
    mapping = _chunk_index_pure.ChunkIndex(STRIDE)
    first = len(table.seqs)
    for chunk_id in range(5000):
        for index in (table, mapping):
            _insert(index, _key(3, 4, chunk_id))
    assert len(table.seqs) > first
    for chunk_id in range(0, 5000, 2):
        for index in (table, mapping):
            _remove(index, _key(3, 4, chunk_id))
    for chunk_id in range(5000, 8000):
        for index in (table, mapping):
            _insert(index, _key(3, 4, chunk_id))
    for chunk_id in range(8000):
        key = _key(3, 4, chunk_id)
        contents = _slot_contents(table, key)
        assert contents == _slot_contents(mapping, key)
        assert (contents is None) == (chunk_id < 5000 and chunk_id % 2 == 0)
