"""The /proc/meminfo and /proc/vmstat names of upstream's MeminfoCounters and VmstatCounters."""

from __future__ import annotations

from perfetto_protos.common import sys_stats_counters_pb2 as counters

__all__ = ["MEMINFO_KEYS", "VMSTAT_KEYS"]

MEMINFO_KEYS: dict[bytes, int] = {
    b"MemTotal": counters.MEMINFO_MEM_TOTAL,
    b"MemFree": counters.MEMINFO_MEM_FREE,
    b"MemAvailable": counters.MEMINFO_MEM_AVAILABLE,
    b"Buffers": counters.MEMINFO_BUFFERS,
    b"Cached": counters.MEMINFO_CACHED,
    b"SwapCached": counters.MEMINFO_SWAP_CACHED,
    b"Active": counters.MEMINFO_ACTIVE,
    b"Inactive": counters.MEMINFO_INACTIVE,
    b"Active(anon)": counters.MEMINFO_ACTIVE_ANON,
    b"Inactive(anon)": counters.MEMINFO_INACTIVE_ANON,
    b"Active(file)": counters.MEMINFO_ACTIVE_FILE,
    b"Inactive(file)": counters.MEMINFO_INACTIVE_FILE,
    b"Unevictable": counters.MEMINFO_UNEVICTABLE,
    b"Mlocked": counters.MEMINFO_MLOCKED,
    b"SwapTotal": counters.MEMINFO_SWAP_TOTAL,
    b"SwapFree": counters.MEMINFO_SWAP_FREE,
    b"Dirty": counters.MEMINFO_DIRTY,
    b"Writeback": counters.MEMINFO_WRITEBACK,
    b"AnonPages": counters.MEMINFO_ANON_PAGES,
    b"Mapped": counters.MEMINFO_MAPPED,
    b"Shmem": counters.MEMINFO_SHMEM,
    b"Slab": counters.MEMINFO_SLAB,
    b"SReclaimable": counters.MEMINFO_SLAB_RECLAIMABLE,
    b"SUnreclaim": counters.MEMINFO_SLAB_UNRECLAIMABLE,
    b"KernelStack": counters.MEMINFO_KERNEL_STACK,
    b"PageTables": counters.MEMINFO_PAGE_TABLES,
    b"CommitLimit": counters.MEMINFO_COMMIT_LIMIT,
    b"Committed_AS": counters.MEMINFO_COMMITED_AS,
    b"VmallocTotal": counters.MEMINFO_VMALLOC_TOTAL,
    b"VmallocUsed": counters.MEMINFO_VMALLOC_USED,
    b"VmallocChunk": counters.MEMINFO_VMALLOC_CHUNK,
    b"CmaTotal": counters.MEMINFO_CMA_TOTAL,
    b"CmaFree": counters.MEMINFO_CMA_FREE,
    b"Gpu": counters.MEMINFO_GPU,
    b"Zram": counters.MEMINFO_ZRAM,
    b"Misc": counters.MEMINFO_MISC,
    b"ION_heap": counters.MEMINFO_ION_HEAP,
    b"ION_heap_pool": counters.MEMINFO_ION_HEAP_POOL,
}
"""A /proc/meminfo key (before its colon) -> its MeminfoCounters value."""

VMSTAT_KEYS: dict[bytes, int] = {
    name.removeprefix("VMSTAT_").lower().encode(): number
    for name, number in counters.VmstatCounters.items()
    if number
}
"""A /proc/vmstat key -> its VmstatCounters value (each enum name is its key, upper-cased)."""
