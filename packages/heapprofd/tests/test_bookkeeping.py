"""Per-callstack totals of sampled allocations."""

from __future__ import annotations

from heapprofd._bookkeeping import HeapTracker


def test_mallocs_and_frees_are_totalled_per_callstack() -> None:
    heap = HeapTracker("python", 4096)
    heap.malloc(1, 0x10, 4096)
    heap.malloc(1, 0x20, 8192)
    heap.malloc(2, 0x30, 4096)
    heap.free(0x20)
    heap.free(0x999)  # never sampled: ignored
    one, two = heap.callstacks[1], heap.callstacks[2]
    assert (one.allocated, one.freed, one.alloc_count, one.free_count) == (12288, 8192, 2, 1)
    assert (two.allocated, two.freed) == (4096, 0)


def test_an_address_reused_without_a_free_counts_as_freed() -> None:
    heap = HeapTracker("python", 4096)
    heap.malloc(1, 0x10, 4096)
    heap.malloc(2, 0x10, 4096)
    assert heap.callstacks[1].freed == 4096
    assert heap.callstacks[2].freed == 0


def test_dump_at_max_keeps_the_totals_at_the_peak() -> None:
    heap = HeapTracker("python", 1, track_max=True)
    heap.malloc(1, 0x10, 100)
    heap.malloc(2, 0x20, 50)
    heap.free(0x10)
    heap.malloc(2, 0x30, 10)
    assert (heap.callstacks[1].max, heap.callstacks[2].max) == (100, 50)
    assert heap.callstacks[2].max_count == 1
