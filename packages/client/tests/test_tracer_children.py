"""--follow-children: Python child processes land in the same trace on their own tracks."""

from __future__ import annotations

from pathlib import Path

import pytest
from tracer_support import decode, run_traced

POOL = """
import multiprocessing as mp
def square(x):
    return x * x
if __name__ == "__main__":
    mp.set_start_method("{method}")
    with mp.Pool(2) as pool:
        print(sum(pool.map(square, range(20))))
"""


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_multiprocessing_pool_workers_are_traced(tmp_path: Path, method: str) -> None:
    program = POOL.replace("{method}", method)
    proc, out = run_traced(tmp_path, program, options=("--follow-children",), timeout=180)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "2470\n"
    trace = decode(out)
    assert not [p for p in trace.problems if "not interned" in p or "backwards" in p]
    parent = next(t.pid for t in trace.by_name("MainThread") if "<module __main__>" in t.names())
    worker_pids = {
        t.pid for t in trace.threads.values() if "square" in t.names() and t.pid != parent
    }
    assert worker_pids, "no worker recorded square()"
    squares = sum(t.names().count("square") for t in trace.threads.values())
    assert squares == 20
    assert worker_pids <= set(trace.processes)
    # Pool.__exit__ terminates the workers: a spawned worker killed while still starting, before
    # it ran anything, leaves no events. The summary must count what the trace holds.
    assert len(trace.processes) >= 2
    assert f"from {len(trace.processes)} processes" in proc.stderr
    assert not list(tmp_path.glob(".perfetto-trace-children-*"))


def test_without_follow_children_only_the_parent_is_traced(tmp_path: Path) -> None:
    proc, out = run_traced(tmp_path, POOL.replace("{method}", "fork"))
    assert proc.returncode == 0, proc.stderr
    trace = decode(out)
    assert len(trace.processes) == 1
    assert "square" not in trace.all_names()


FORK_ENDING = """
import os
def in_child():
    return 7
def in_parent():
    return 8
pid = os.fork()
if pid == 0:
    in_child()
    {end}
in_parent()
_, status = os.waitpid(pid, 0)
print("child exit", os.waitstatus_to_exitcode(status))
"""

FORK = FORK_ENDING.format(end="os._exit(0)")


def test_a_forked_child_gets_its_own_process_track(tmp_path: Path) -> None:
    proc, out = run_traced(tmp_path, FORK, options=("--follow-children",))
    assert proc.returncode == 0, proc.stderr
    trace = decode(out)
    assert trace.problems == []
    [child] = [t for t in trace.threads.values() if "in_child" in t.names()]
    [parent] = [t for t in trace.threads.values() if "in_parent" in t.names()]
    assert child.pid != parent.pid
    assert "in_parent" not in child.names()
    assert "in_child" not in parent.names()
    assert set(trace.processes) == {child.pid, parent.pid}


def test_a_forked_child_is_not_traced_without_follow_children(tmp_path: Path) -> None:
    proc, out = run_traced(tmp_path, FORK)
    assert proc.returncode == 0, proc.stderr
    trace = decode(out)
    assert trace.problems == []
    assert "in_parent" in trace.all_names()
    assert "in_child" not in trace.all_names()


@pytest.mark.parametrize(
    ("end", "status"), [("raise SystemExit(3)", 3), ("raise ValueError('in the child')", 1)]
)
@pytest.mark.parametrize("follow", [False, True])
def test_a_forked_child_ending_through_the_program_leaves_one_summary_and_its_status(
    tmp_path: Path, end: str, status: int, follow: bool
) -> None:
    options = ("--follow-children",) if follow else ()
    proc, out = run_traced(tmp_path, FORK_ENDING.format(end=end), options=options)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"child exit {status}\n"
    # The summary is the parent's alone: the child neither finishes its trace nor prints one.
    assert proc.stderr.count("perfetto-trace: wrote") == 1, proc.stderr
    assert proc.stderr.count("Traceback") == (status == 1), proc.stderr
    assert ("from 2 processes" in proc.stderr) is follow
    trace = decode(out)
    assert trace.problems == []
    assert trace.all_names().count("in_parent") == 1
    assert ("in_child" in trace.all_names()) is follow
    assert not list(tmp_path.glob(".perfetto-trace-children-*"))


def test_subprocess_python_children_are_traced(tmp_path: Path) -> None:
    (tmp_path / "child.py").write_text("def child_work():\n    return 1\nchild_work()\n")
    program = """
import subprocess, sys
subprocess.run([sys.executable, "child.py"], check=True)
"""
    proc, out = run_traced(tmp_path, program, options=("--follow-children",))
    assert proc.returncode == 0, proc.stderr
    trace = decode(out)
    [child] = [t for t in trace.threads.values() if "child_work" in t.names()]
    assert trace.processes[child.pid] == "child.py"


def test_a_child_killed_while_starting_is_reported_lost(tmp_path: Path) -> None:
    program = """
import multiprocessing as mp
def child():
    pass
if __name__ == "__main__":
    mp.set_start_method("spawn")
    p = mp.Process(target=child)
    p.start()
    p.kill()
    p.join()
    print(p.exitcode)
"""
    proc, out = run_traced(tmp_path, program, options=("--follow-children",), timeout=180)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "-9\n"
    # Killed before its recording started (no part at all) or during it (an unfinished part).
    assert (
        "1 child process ended before recording started in it" in proc.stderr
        or "a child did not finish its trace" in proc.stderr
    ), proc.stderr
    assert "child" not in decode(out).all_names()


SIGTERMED = """
import os, signal, time
def busy():
    return sum(range(3))
children = []
for delay in range(12):
    pid = os.fork()
    if pid == 0:
        while True:
            busy()
    time.sleep(0.0005 * delay)
    os.kill(pid, signal.SIGTERM)
    children.append(pid)
print(sorted(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in children)[0])
"""


def test_children_terminated_at_any_point_complete_their_parts(tmp_path: Path) -> None:
    # SIGTERM lands anywhere: at fork, in the program, in the middle of writing a batch.
    proc, out = run_traced(tmp_path, SIGTERMED, options=("--follow-children",), timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "-15\n"
    trace = decode(out)
    assert "did not finish" not in proc.stderr
    assert f"from {len(trace.processes)} processes" in proc.stderr
    assert len(trace.processes) == 13


LOST_WAKEUP = """
import multiprocessing as mp, os, signal, threading, time
lock = mp.Lock()
lock.acquire()
def child_work():
    return 1
pid = os.fork()
if pid == 0:
    child_work()
    def take_sigterm():
        time.sleep(0.2)
        signal.pthread_kill(threading.get_ident(), signal.SIGTERM)
    threading.Thread(target=take_sigterm, daemon=True).start()
    lock.acquire()  # blocks in sem_wait, which the signal on the other thread does not wake
    os._exit(0)
for _ in range(300):
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        print(os.waitstatus_to_exitcode(status))
        break
    time.sleep(0.1)
else:
    os.kill(pid, signal.SIGKILL)
    print("the child hung")
"""


def test_a_sigterm_the_main_thread_never_sees_still_ends_the_child(tmp_path: Path) -> None:
    # Python runs handlers on the main thread only when it returns to the interpreter; a child
    # blocked in C (a Pool worker waiting for the queue's lock) used to wait there forever.
    proc, out = run_traced(tmp_path, LOST_WAKEUP, options=("--follow-children",), timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "-15\n"
    trace = decode(out)
    assert "did not finish" not in proc.stderr
    [child] = [t for t in trace.threads.values() if "child_work" in t.names()]
    assert child.pid in trace.processes
    assert len(trace.processes) == 2
