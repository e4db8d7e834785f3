"""A program whose heap profile is known in advance: record it in one command.

    heap_profile -o heap.pftrace -- examples/heap_profile_example.py
    python examples/heap_profile_example.py heap.pftrace     (runs that command itself)

then open heap.pftrace in https://ui.perfetto.dev (the process's "Heap profile" track shows
the flamegraph). `load_cache` keeps about 10 MB in 1 KB objects until the program exits
(frees made after the program's atexit handlers are not recorded), `handle_requests` allocates
about 20 MB and frees all of it, and the custom heap "connection_pool" (shown with
`heap_profile --all-heaps`) holds 64 connections of 64 KiB.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import heapprofd

POOL = heapprofd.Heap("connection_pool")
CACHE: list[bytes] = []


def load_cache() -> None:
    CACHE.extend(bytes(1024) for _ in range(10_000))


def handle_requests() -> int:
    total = 0
    for request in range(20_000):
        body = bytearray(1024)
        total += len(body) + request
    return total


def open_connections() -> list[int]:
    handles = list(range(1, 65))
    for handle in handles:
        POOL.report_allocation(handle, 64 * 1024)
    return handles


def main() -> None:
    load_cache()
    handle_requests()
    connections = open_connections()
    print(f"cached {len(CACHE)} entries, {len(connections)} connections open")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        # heap_profile is installed beside this interpreter (with perfetto-heapprofd).
        heap_profile = Path(sys.executable).with_name("heap_profile")
        command = [str(heap_profile), "-o", sys.argv[1], "--", __file__]
        sys.exit(subprocess.run(command, check=False).returncode)
    main()
