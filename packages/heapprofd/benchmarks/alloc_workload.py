"""An allocation-heavy workload: builds and drops dicts, lists and strings.

Prints `CPU <seconds>` (process CPU time of the workload alone). With HEAPPROFD_WAIT_S set
and the client loaded, it first waits until a heapprofd session profiles it.
"""

from __future__ import annotations

import os
import sys
import time


def work(rounds: int) -> int:
    total = 0
    keep: list[object] = []
    for i in range(rounds):
        name = f"item-{i}"
        record = {
            "id": i,
            "name": name,
            "tags": [str(i), str(i * 2)],
            "blob": "x" * (i % 300),
        }
        row = [record, (i, i + 1), {"nested": {"k": str(i)}}]
        total += len(row) + len(name)
        if i % 50 == 0:
            keep.append(bytearray(2048))
        if len(keep) > 200:
            keep.clear()
    return total


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
    if os.environ.get("HEAPPROFD_WAIT_S"):
        from heapprofd import client

        client.wait_until_profiling(float(os.environ["HEAPPROFD_WAIT_S"]))
    start = time.process_time()
    work(rounds)
    print(f"CPU {time.process_time() - start:.6f}", flush=True)


if __name__ == "__main__":
    main()
