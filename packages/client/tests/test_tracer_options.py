"""perfetto-trace's filters and flight recorder do what they say."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from importlib.metadata import version
from pathlib import Path

from tracer_support import BIN, Slice, decode, end, run_traced, sigint_reaches_children

PROGRAM = """
import json, time
def leaf(i):
    return json.dumps(i)
def middle(i):
    return leaf(i)
def top():
    return [middle(i) for i in range(20)]
def slow():
    time.sleep(0.05)
top()
slow()
"""


def _collection(name: str) -> bool:
    """Whether a slice is a garbage collection: the filters of calls leave them alone."""
    return name.startswith("gc (generation")


def _holds_collection(slice_: Slice) -> bool:
    """Whether `slice_` is a garbage collection or one ran within it."""
    return _collection(slice_.name) or any(_holds_collection(c) for c in slice_.children)


def test_include_records_only_matching_modules(tmp_path: Path) -> None:
    proc, out = run_traced(tmp_path, PROGRAM, options=("--include", "json"))
    assert proc.returncode == 0, proc.stderr
    # a collection may run while the program imports json
    names = {n for n in decode(out).all_names() if not _collection(n)}
    assert names, "nothing recorded"
    assert all(n.startswith(("json.", "<module json")) for n in names), names
    assert "json.dumps" in names


def test_exclude_drops_matching_modules_and_their_builtins(tmp_path: Path) -> None:
    proc, out = run_traced(tmp_path, PROGRAM, options=("--exclude", "json*"))
    assert proc.returncode == 0, proc.stderr
    trace = decode(out)
    assert trace.problems == []
    names = trace.all_names()
    assert not [n for n in names if n.startswith("json")]
    leaves = [s for t in trace.threads.values() for s in t.slices if s.name == "leaf"]
    assert len(leaves) == 20
    # json.dumps is excluded, and with it what it calls (isinstance in its encoder).
    assert [s.children for s in leaves] == [[]] * 20


def test_exclude_by_file_glob(tmp_path: Path) -> None:
    proc, out = run_traced(tmp_path, PROGRAM, options=("--exclude", "*/json/*"))
    assert proc.returncode == 0, proc.stderr
    names = decode(out).all_names()
    assert names.count("leaf") == 20
    assert not [n for n in names if n.startswith("json.")]


def test_max_depth(tmp_path: Path) -> None:
    proc, out = run_traced(tmp_path, PROGRAM, options=("--max-depth", "2"))
    assert proc.returncode == 0, proc.stderr
    trace = decode(out)
    assert trace.problems == []
    [main] = trace.by_name("MainThread")
    assert max(s.depth for s in main.slices if not _collection(s.name)) == 1
    assert "top" in main.names()
    assert "middle" not in main.names()


def test_no_c_calls(tmp_path: Path) -> None:
    proc, out = run_traced(tmp_path, PROGRAM, options=("--no-c-calls",))
    assert proc.returncode == 0, proc.stderr
    names = set(decode(out).all_names())
    assert "leaf" in names
    assert "isinstance" not in names
    assert "range" not in names


def test_min_duration_drops_short_slices_but_keeps_nesting(tmp_path: Path) -> None:
    proc, out = run_traced(tmp_path, PROGRAM, options=("--min-duration", "20ms"))
    assert proc.returncode == 0, proc.stderr
    trace = decode(out)
    assert trace.problems == []
    [main] = trace.by_name("MainThread")
    # a collection is kept whatever its duration, and with it the slices it ran in
    assert all(s.dur >= 20_000_000 for s in main.slices if not _holds_collection(s))
    # slow() sleeps 50 ms: it and its sleep are kept, nested under the module.
    [module] = main.program_roots()
    assert module.name == "<module __main__>"
    [slow] = [s for s in main.slices if s.name == "slow"]
    assert [c.name for c in slow.children] == ["time.sleep"]
    # leaf() is called 20 times and does almost nothing: not every call can last 20 ms.
    assert main.names().count("leaf") < 20


RING = """
import os, sys
def marker_first():
    pass
def work(i):
    return i + 1
def marker_last():
    pass
marker_first()
for i in range(400000):
    work(i)
marker_last()
"""


def test_ring_keeps_only_the_newest_events(tmp_path: Path) -> None:
    proc, out = run_traced(tmp_path, RING, options=("--ring", "1", "--no-c-calls"))
    assert proc.returncode == 0, proc.stderr
    size = out.stat().st_size
    assert size <= (1 << 20) + (256 << 10), size
    assert "lost (older than the ring buffer keeps)" in proc.stderr
    trace = decode(out)
    # Batches are self-contained, so a cut ring still decodes; only slices that began
    # before the cut lose their begin (trace_processor ignores such ends).
    assert not [p for p in trace.problems if "not interned" in p or "backwards" in p]
    names = trace.all_names()
    assert "marker_last" in names
    assert "marker_first" not in names
    assert names.count("work") > 1000


def test_sigusr1_writes_a_snapshot_of_the_ring(tmp_path: Path) -> None:
    program = """
import time
def tick():
    time.sleep(0.001)
print("ready", flush=True)
while True:
    tick()
"""
    script = tmp_path / "prog.py"
    script.write_text(program)
    out = tmp_path / "ring.pftrace"
    with sigint_reaches_children():
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "perfetto_client._tracer",
                "run",
                "--ring",
                "4",
                "-o",
                str(out),
                str(script),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "ready\n"
        time.sleep(0.3)
        deadline = time.monotonic() + 60
        # The pure hook may take the signal while it records an event: that snapshot lacks the
        # thread's last batch, which it hands over at its next event, in time for the next one.
        count = 0
        while time.monotonic() < deadline:
            snapshot = tmp_path / f"ring.snapshot-{count + 1}.pftrace"
            proc.send_signal(signal.SIGUSR1)
            while not snapshot.exists() and time.monotonic() < deadline:  # renamed in whole
                time.sleep(0.05)
            count += 1
            if "tick" in decode(snapshot).all_names():
                break
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
    finally:
        end(proc)
    assert f"snapshot written to {snapshot}" in stderr
    assert "tick" in decode(snapshot).all_names()
    assert count <= 2
    assert "tick" in decode(out).all_names()
    assert "KeyboardInterrupt" in stderr
    assert proc.returncode == -signal.SIGINT


def test_sigusr1_while_perfetto_trace_starts_writes_a_snapshot(tmp_path: Path) -> None:
    # SIGUSR1 sent while perfetto-trace loads its recorder (before it could install a handler)
    # neither kills the program nor is lost: it writes a snapshot once the recording runs.
    (tmp_path / "prog.py").write_text(
        "import os, time\n"
        "def tick():\n"
        "    time.sleep(0.001)\n"
        "tick()\n"  # once at least, however soon `stop` appears
        "while not os.path.exists('stop'):\n"
        "    tick()\n"
    )
    log = tmp_path / "stderr.txt"
    command = [str(BIN / "perfetto-trace"), "run", "--ring", "4", "-o", "ring.pftrace", "prog.py"]
    with log.open("w") as stderr:  # each import's line as it completes
        proc = subprocess.Popen(
            command, cwd=tmp_path, stderr=stderr, env={**os.environ, "PYTHONPROFILEIMPORTTIME": "1"}
        )
    snapshot = tmp_path / "ring.snapshot-1.pftrace"
    try:
        deadline = time.monotonic() + 60
        while not re.search(r"\| +perfetto_client\._tracer\b", log.read_text()):
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "perfetto-trace did not start"
            time.sleep(0.001)
        while not snapshot.exists():  # perfetto-trace is loading the recorder: signal it now
            proc.send_signal(signal.SIGUSR1)
            time.sleep(0.01)
            assert proc.poll() is None, f"killed by SIGUSR1: {proc.returncode}"
            assert time.monotonic() < deadline, "no snapshot"
        (tmp_path / "stop").touch()
        assert proc.wait(60) == 0, log.read_text()
    finally:
        end(proc)
    assert "perfetto-trace: snapshot written to ring.snapshot-1.pftrace" in log.read_text()
    assert decode(snapshot).problems == []
    assert "tick" in decode(tmp_path / "ring.pftrace").all_names()


def test_a_burst_of_sigusr1_writes_snapshots_numbered_in_order_and_the_program_goes_on(
    tmp_path: Path,
) -> None:
    # Signals sent faster than snapshots are written interrupt the snapshot being written: each
    # is taken after it, none overwrites another, none hangs or crashes the program.
    (tmp_path / "prog.py").write_text(
        "import os\n"
        "def tick():\n"
        "    pass\n"
        "rounds = 0\n"
        "while not os.path.exists('stop'):\n"
        "    for _ in range(1000):\n"
        "        tick()\n"
        "    rounds += 1\n"
        "    if rounds == 100:\n"
        "        print('ready', flush=True)\n"
    )
    command = [str(BIN / "perfetto-trace"), "run", "--ring", "1", "-o", "ring.pftrace", "prog.py"]
    proc = subprocess.Popen(
        command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "ready\n"
        deadline = time.monotonic() + 60
        while not (tmp_path / "ring.snapshot-2.pftrace").exists():  # bursts, till 2 are taken
            assert time.monotonic() < deadline, "fewer than two snapshots"
            for _ in range(100):
                proc.send_signal(signal.SIGUSR1)
                time.sleep(0.0005)
            time.sleep(0.1)
        time.sleep(0.5)
        (tmp_path / "stop").touch()
        _, stderr = proc.communicate(timeout=60)
    finally:
        end(proc)
    assert proc.returncode == 0, stderr
    line = r"snapshot written to (ring\.snapshot-(\d+)\.pftrace) \((\d+) bytes\)"
    written = re.findall(line, stderr)
    assert len(written) >= 2, stderr
    assert [int(n) for _, n, _ in written] == list(range(1, len(written) + 1)), stderr
    files = {p.name: p.stat().st_size for p in tmp_path.iterdir() if p.name.startswith("ring.snap")}
    assert files == {name: int(size) for name, _, size in written}
    # Whole: what a ring snapshot lacks is only the begins of calls older than the ring and
    # the ends of calls still running.
    ring_cut = ("thread MainThread: end without a begin", " never ended")
    for name, _, _ in (written[0], written[len(written) // 2], written[-1]):
        problems = decode(tmp_path / name).problems
        assert [p for p in problems if not p.endswith(ring_cut)] == [], name
        assert "tick" in decode(tmp_path / name).all_names()
    assert "Traceback" not in stderr


def test_a_snapshot_trigger_writes_the_ring_each_time(tmp_path: Path) -> None:
    program = """
from perfetto_client import Tracing
def before():
    pass
def between():
    pass
before()
Tracing.activate_triggers(["dump"])
between()
Tracing.activate_triggers(["something else"])
Tracing.activate_triggers(["dump"])
"""
    options = ("--ring", "4", "--snapshot-trigger", "dump")
    proc, out = run_traced(tmp_path, program, options=options)
    assert proc.returncode == 0, proc.stderr
    first, second = tmp_path / "out.snapshot-1.pftrace", tmp_path / "out.snapshot-2.pftrace"
    assert f"trigger 'dump': snapshot written to {first}" in proc.stderr
    assert f"trigger 'dump': snapshot written to {second}" in proc.stderr
    assert not (tmp_path / "out.snapshot-3.pftrace").exists()
    names = [decode(path).all_names() for path in (first, second, out)]
    assert "before" in names[0]
    assert "between" not in names[0]
    assert "before" in names[1]
    assert "between" in names[1]
    assert "between" in names[2]


def test_a_snapshot_that_cannot_be_written_is_one_line_and_the_recording_goes_on(
    tmp_path: Path,
) -> None:
    program = """
from perfetto_client import Tracing
def before():
    pass
def after():
    pass
before()
Tracing.activate_triggers(["dump"])
after()
Tracing.activate_triggers(["dump"])
"""
    (tmp_path / "out.snapshot-1.pftrace").mkdir()  # where the first snapshot would go
    options = ("--ring", "4", "--snapshot-trigger", "dump")
    proc, out = run_traced(tmp_path, program, options=options)
    assert proc.returncode == 0, proc.stderr
    first, second = tmp_path / "out.snapshot-1.pftrace", tmp_path / "out.snapshot-2.pftrace"
    assert f"perfetto-trace: trigger 'dump': cannot write snapshot {first}: Is a directory\n" in (
        proc.stderr
    )
    assert f"trigger 'dump': snapshot written to {second}" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir() if "snapshot" in p.name) == [
        first.name,
        second.name,
    ]
    assert list(first.iterdir()) == []
    assert {"before", "after"} <= set(decode(second).all_names())
    assert "after" in decode(out).all_names()


def test_a_forked_childs_trigger_writes_no_snapshot(tmp_path: Path) -> None:
    # The child's copy of the ring is not the trace: its trigger must neither claim a snapshot
    # nor overwrite the parent's next one.
    program = """
import os
from perfetto_client import Tracing
def before():
    pass
before()
pid = os.fork()
if pid == 0:
    Tracing.activate_triggers(["dump"])
    os._exit(0)
os.waitpid(pid, 0)
Tracing.activate_triggers(["dump"])
"""
    options = ("--ring", "4", "--snapshot-trigger", "dump")
    proc, _ = run_traced(tmp_path, program, options=options)
    assert proc.returncode == 0, proc.stderr
    first = tmp_path / "out.snapshot-1.pftrace"
    assert proc.stderr.count("snapshot written") == 1
    assert f"trigger 'dump': snapshot written to {first}" in proc.stderr
    assert "before" in decode(first).all_names()
    assert not (tmp_path / "out.snapshot-2.pftrace").exists()


def test_a_snapshot_trigger_needs_a_ring(tmp_path: Path) -> None:
    proc, _ = run_traced(tmp_path, "pass\n", options=("--snapshot-trigger", "dump"))
    assert proc.returncode == 1
    assert proc.stderr == "perfetto-trace: --snapshot-trigger needs --ring\n"


def test_version(tmp_path: Path) -> None:
    result = subprocess.run(
        [str(BIN / "perfetto-trace"), "--version"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"perfetto-trace (perfetto-py) {version('perfetto-client')}\n"
