"""A profilable Python program driven by commands on stdin (one per line)."""

from __future__ import annotations

import sys
import threading
import time

from heapprofd import _client, _native, client
from heapprofd._wire import pack_heap_name

kept: list[bytearray] = []
pool = client.Heap("pool")


def keep_10mb() -> None:
    kept.extend(bytearray(1000) for _ in range(10240))


def thread_keep_10mb() -> None:
    kept.extend(bytearray(1000) for _ in range(10240))


def keep_in_thread() -> None:
    worker = threading.Thread(target=thread_keep_10mb)
    worker.start()
    worker.join()


def free_everything() -> None:
    kept.clear()


def churn() -> None:
    for _ in range(20):
        temporary = [bytearray(1000) for _ in range(1000)]
        del temporary


def pool_allocate() -> None:
    for i in range(1000):
        pool.report_allocation(0x1000 + i, 4096)


def write_garbage() -> None:
    """Writes records no client would: unknown types, short headers, lies about lengths."""
    ring = client_ring()
    ring.write(b"\xff" * 64)
    ring.write(b"\x01\x00")
    ring.write((3).to_bytes(8, "little") + b"\x01" * 8 + b"\xff" * 16)


def heap_flood(count: int) -> int:
    """Names `count` heaps (ids from 1000) that no Heap object stands for."""
    ring = client_ring()
    for i in range(count):
        record = pack_heap_name(1000 + i, f"flood-{i}", 4096)
        while ring.write(record) < 0:  # full: the daemon drains it every 50 ms
            time.sleep(0.001)
    return count


def client_ring() -> _native.SharedRingBuffer:
    from heapprofd import _client

    connection = _client._state.connection
    assert connection is not None
    ring = connection.ring
    assert isinstance(ring, _native.SharedRingBuffer)
    return ring


def main() -> None:
    print("READY", flush=True)
    for line in sys.stdin:
        command = line.strip()
        if command == "wait":
            print("PROFILING" if client.wait_until_profiling(30) else "NOT PROFILING", flush=True)
        elif command == "connected":
            while not _client.connections():
                time.sleep(0.01)
            print("CONNECTED", flush=True)
        elif command == "keep":
            keep_10mb()
            print("KEPT", flush=True)
        elif command == "thread":
            keep_in_thread()
            print("KEPT", flush=True)
        elif command == "free":
            free_everything()
            print("FREED", flush=True)
        elif command == "churn":
            churn()
            print("CHURNED", flush=True)
        elif command == "pool":
            pool_allocate()
            print("POOLED", flush=True)
        elif command == "detach":
            _native.deactivate()
            print(f"DETACHED {_native.client_stats()['sampled']}", flush=True)
        elif command == "garbage":
            write_garbage()
            print("GARBAGE", flush=True)
        elif command.startswith("heapflood "):
            print(f"FLOODED {heap_flood(int(command.split()[1]))}", flush=True)
        elif command == "state":
            print(f"STATE {client.is_profiling()}", flush=True)


if __name__ == "__main__":
    main()
