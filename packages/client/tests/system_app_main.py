"""An application using the SYSTEM backend, driven by the system backend tests.

Prints `connected N` each time its producer connects, then for each line on stdin:
`emit TAG` records a slice per thread (3 threads), a counter, an asyncio slice and, in a
forked child, one slice; prints `emitted TAG` once done. Exits when stdin closes.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
import warnings

import perfetto_client as pc
from perfetto_client import Backend, Tracing, _tracing

CAT = pc.Category("app")


def connections() -> int:
    system = _tracing._state.system
    return system.connections if system is not None else 0


def watch_connections() -> None:
    seen = 0
    while True:
        now = connections()
        if now != seen:
            seen = now
            print(f"connected {now}", flush=True)
        time.sleep(0.01)


@pc.trace(CAT)
def work(tag: str, depth: int) -> None:
    if depth:
        work(tag, depth - 1)


def emit(tag: str) -> None:
    with pc.trace_event(CAT, f"main {tag}", tag=tag):
        work(tag, 2)
    threads = [
        threading.Thread(target=work, args=(tag, 1), name=f"worker {tag} {i}") for i in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    pc.counter(CAT, "progress", len(tag))

    async def task_body() -> None:
        with pc.trace_event(CAT, f"async {tag}"):
            await asyncio.sleep(0.001)

    asyncio.run(task_body())
    parents = CAT.instances
    with warnings.catch_warnings():  # 3.12+: fork() of a multi-threaded process (stderr is checked)
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:
        # The child starts clean: its own producer, none of the parent's session instances
        # (traced may meanwhile start the session on the child's producer: a new instance).
        ok = all(i is not p for i in CAT.instances for p in parents)
        os._exit(0 if ok else 3)
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        print("child saw the parent's session", flush=True)


def wait_for_session() -> bool:
    """Waits until a session's instance (not startup tracing) records CAT; whether one does
    within 50 s (a loaded machine's pause; the test waits 60 s for the app's line)."""
    from perfetto_client._track_event import StartupInstance

    deadline = time.monotonic() + 50
    while time.monotonic() < deadline:
        if pc.is_enabled(CAT) and any(not isinstance(i, StartupInstance) for i in CAT.instances):
            return True
        time.sleep(0.01)
    return False


def main() -> None:
    Tracing.initialize(Backend.SYSTEM)
    if "--startup" in sys.argv:
        Tracing.setup_startup_tracing(timeout_ms=60_000)
        with pc.trace_event(CAT, "before any session", early=True):
            work("startup", 1)
        print("startup events written", flush=True)
    threading.Thread(target=watch_connections, daemon=True).start()
    for line in sys.stdin:
        command, _, tag = line.strip().partition(" ")
        if command == "emit":
            if not wait_for_session():
                print(f"no session to emit {tag} into", flush=True)  # the test fails on it
                continue
            emit(tag)
            print(f"emitted {tag}", flush=True)


if __name__ == "__main__":
    main()
