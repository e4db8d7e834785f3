"""Per-process, per-heap totals of sampled allocations by callstack (main thread only)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

__all__ = [
    "MAX_HEAPS_PER_PROCESS",
    "CallstackTotals",
    "HeapTracker",
    "ProcessState",
    "monotonic_coarse_ns",
]

MAX_HEAPS_PER_PROCESS = 256
"""Heaps the daemon keeps per client process; the records of any further heap id are refused.
Our Python client has at most 65 heaps (`libc.malloc`, `python`, 63 custom ones) and
upstream's client API 256, so only a misbehaving client reaches it."""


class CallstackTotals:
    """Upstream's HeapTracker::CallstackAllocations: what one callstack allocated and freed."""

    __slots__ = ("alloc_count", "allocated", "free_count", "freed", "max", "max_count")

    def __init__(self) -> None:
        self.allocated = 0
        self.freed = 0
        self.alloc_count = 0
        self.free_count = 0
        self.max = 0
        self.max_count = 0


class HeapTracker:
    """Live sampled allocations of one heap and the totals of each callstack."""

    def __init__(self, name: str, interval: int, track_max: bool = False) -> None:
        self.name = name
        self.track_max = track_max
        self.interval = interval
        self.callstacks: dict[int, CallstackTotals] = {}
        self.live: dict[int, tuple[CallstackTotals, int]] = {}
        self.samples = 0
        self.current = 0
        self.max_total = 0

    def malloc(self, callstack: int, address: int, sample_size: int) -> None:
        if address in self.live:
            self.free(address)
        totals = self.callstacks.get(callstack)
        if totals is None:
            totals = self.callstacks[callstack] = CallstackTotals()
        totals.allocated += sample_size
        totals.alloc_count += 1
        self.live[address] = (totals, sample_size)
        self.samples += 1
        self.current += sample_size
        if self.track_max and self.current > self.max_total:
            self.max_total = self.current
            for each in self.callstacks.values():
                each.max = each.allocated - each.freed
                each.max_count = each.alloc_count - each.free_count

    def free(self, address: int) -> None:
        entry = self.live.pop(address, None)
        if entry is None:
            return
        totals, size = entry
        totals.freed += size
        totals.free_count += 1
        self.current -= size


@dataclass
class ProcessState:
    """One connected (or once connected) client process."""

    pid: int
    from_startup: bool
    connection_id: int
    heaps: dict[int, HeapTracker] = field(default_factory=dict)
    frames: dict[int, tuple[str, str, int]] = field(default_factory=dict)
    # native frame id -> (function, (path, build id, start, end, offset), rel_pc)
    native_frames: dict[int, tuple[str, tuple[str, str, int, int, int], int]] = field(
        default_factory=dict
    )
    callstacks: dict[int, tuple[int, ...]] = field(default_factory=dict)
    unwinding_errors: int = 0
    disconnected: bool = False
    rejected_concurrent: bool = False
    buffer_overran: bool = False
    buffer_corrupted: bool = False
    hit_guardrail: bool = False
    client_error: int = 0
    spinlock_blocked_us: int = 0
    start_timestamp: int = 0
    refused_heap_records: int = 0
    """HeapName, Malloc and Free records of heap ids past MAX_HEAPS_PER_PROCESS, dropped."""

    def heap(self, heap_id: int) -> HeapTracker | None:
        """The tracker of `heap_id` (made for a heap used before it was named); None when the
        process has MAX_HEAPS_PER_PROCESS heaps already (the record is counted as refused)."""
        tracker = self.heaps.get(heap_id)
        if tracker is None:
            if len(self.heaps) >= MAX_HEAPS_PER_PROCESS:
                self.refused_heap_records += 1
                return None
            tracker = self.heaps[heap_id] = HeapTracker(f"heap-{heap_id}", 0)
        return tracker

    def name_heap(self, heap_id: int, name: str, interval: int, track_max: bool) -> None:
        """Names `heap_id` (a HeapName record), within the bound on heaps."""
        tracker = self.heaps.get(heap_id)
        if tracker is not None:
            tracker.name, tracker.interval = name, interval
        elif len(self.heaps) >= MAX_HEAPS_PER_PROCESS:
            self.refused_heap_records += 1
        else:
            self.heaps[heap_id] = HeapTracker(name, interval, track_max)


_CLOCK_MONOTONIC_COARSE = 6  # Linux's clock id; the time module does not name it


def monotonic_coarse_ns() -> int:
    """CLOCK_MONOTONIC_COARSE, the clock of upstream's heap dump timestamps."""
    return time.clock_gettime_ns(_CLOCK_MONOTONIC_COARSE)
