"""An allocation-heavy workload through a C extension: sqlite3 (which allocates with malloc)
inserting and querying rows of an in-memory database.

Prints `CPU <seconds>` (process CPU time of the workload alone). With HEAPPROFD_WAIT_S set
and the client loaded, it first waits until a heapprofd session profiles it.
"""

from __future__ import annotations

import os
import sqlite3
import sys
import time


def work(rounds: int) -> int:
    total = 0
    for batch in range(rounds):
        db = sqlite3.connect(":memory:")
        db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT, blob TEXT)")
        db.executemany(
            "INSERT INTO t (name, blob) VALUES (?, ?)",
            ((f"item-{batch}-{i}", "x" * (i % 700)) for i in range(200)),
        )
        db.execute("CREATE INDEX by_name ON t (name)")
        total += sum(len(row[0]) for row in db.execute("SELECT blob FROM t ORDER BY name"))
        db.close()
    return total


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 2_000
    if os.environ.get("HEAPPROFD_WAIT_S"):
        from heapprofd import client

        client.wait_until_profiling(float(os.environ["HEAPPROFD_WAIT_S"]))
    start = time.process_time()
    work(rounds)
    print(f"CPU {time.process_time() - start:.6f}", flush=True)


if __name__ == "__main__":
    main()
