"""Reads traces written by perfetto-trace with upstream's schema, as a user's tools would.

`decode(path)` resolves interning, incremental timestamps, packet defaults and track
descriptors per sequence and rebuilds every thread's slices from their begin/end events,
recording anything that would confuse trace_processor (an end without a begin, a slice
never ended, a name that is not interned, timestamps going backwards) in `problems`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from perfetto_protos.upstream import parse_upstream_trace
from trace_model import TraceModel

SLICE_BEGIN, SLICE_END, INSTANT = 1, 2, 3
SEQ_INCREMENTAL_STATE_CLEARED = 1
SEQ_NEEDS_INCREMENTAL_STATE = 2
ROOT = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent
BUILD_NATIVE = ROOT / "tools" / "build_native.py"
NOT_BUILT = "perfetto-trace's compiled hook is not built (in a checkout: tools/build_native.py)"


def build_in_place() -> None:
    """In a checkout, builds the stale compiled modules in place (tools/build_native.py)."""
    if BUILD_NATIVE.is_file() and not os.environ.get("PERFETTO_PY_PURE"):
        subprocess.run([sys.executable, str(BUILD_NATIVE)], check=True)


def hook_builds() -> list[str]:
    """The hook builds to test: the pure one, and the compiled one unless PERFETTO_PY_PURE=1."""
    return ["pure"] if os.environ.get("PERFETTO_PY_PURE") else ["pure", "compiled"]


def require_compiled_hook() -> None:
    """Fails the test in one line when the compiled hook is not built or does not load."""
    if importlib.util.find_spec("perfetto_client._tracer._hook") is None:
        pytest.fail(NOT_BUILT, pytrace=False)
    try:
        importlib.import_module("perfetto_client._tracer._recorder")
    except ImportError as e:
        pytest.fail(f"perfetto-trace's compiled hook does not load: {e}", pytrace=False)


HOOKS = hook_builds()
"""The hooks the tests run: the pure one, and the compiled one unless PERFETTO_PY_PURE=1."""


@dataclasses.dataclass
class Slice:
    name: str
    ts: int
    dur: int
    depth: int
    file: str = ""
    line: int = 0
    children: list[Slice] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Thread:
    pid: int
    tid: int
    name: str
    slices: list[Slice] = dataclasses.field(default_factory=list)  # every slice, in begin order
    instants: list[tuple[int, str]] = dataclasses.field(default_factory=list)

    def names(self) -> list[str]:
        return [s.name for s in self.slices]

    def roots(self) -> list[Slice]:
        return [s for s in self.slices if s.depth == 0]

    def program_roots(self) -> list[Slice]:
        """The roots other than garbage collections: a collection may run at any moment,
        before the program's module too (set off by perfetto-trace's own allocations)."""
        return [s for s in self.roots() if not s.name.startswith("gc (generation")]


@dataclasses.dataclass
class Decoded:
    threads: dict[int, Thread]  # by track uuid
    processes: dict[int, str]  # pid -> process name
    problems: list[str]

    def all_names(self) -> list[str]:
        return [n for t in self.threads.values() for n in t.names()]

    def by_name(self, name: str) -> list[Thread]:
        return [t for t in self.threads.values() if t.name == name]


@dataclasses.dataclass
class _Sequence:
    names: dict[int, str] = dataclasses.field(default_factory=dict)
    locations: dict[int, tuple[str, int]] = dataclasses.field(default_factory=dict)
    track: int = 0
    clock: int | None = None
    last_ts: int = 0
    cleared: bool = False


def decode(path: str | os.PathLike[str]) -> Decoded:
    trace: Any = parse_upstream_trace(Path(path).read_bytes())
    sequences: dict[int, _Sequence] = {}
    threads: dict[int, Thread] = {}
    processes: dict[int, str] = {}
    problems: list[str] = []
    events: list[tuple[int, int, int, str, str, int]] = []  # track, ts, kind, name, file, line
    for packet in trace.packet:
        seq_id = packet.trusted_packet_sequence_id
        if packet.sequence_flags & SEQ_INCREMENTAL_STATE_CLEARED:
            sequences[seq_id] = _Sequence(cleared=True)
        seq = sequences.setdefault(seq_id, _Sequence())
        if packet.HasField("trace_packet_defaults"):
            defaults = packet.trace_packet_defaults
            seq.clock = defaults.timestamp_clock_id
            seq.track = defaults.track_event_defaults.track_uuid
        if packet.HasField("interned_data"):
            for name in packet.interned_data.event_names:
                seq.names[name.iid] = name.name
            for loc in packet.interned_data.source_locations:
                seq.locations[loc.iid] = (loc.file_name, loc.line_number)
        if packet.HasField("clock_snapshot"):
            for clock in packet.clock_snapshot.clocks:
                if clock.clock_id == seq.clock and clock.is_incremental:
                    seq.last_ts = clock.timestamp
            continue
        if packet.HasField("track_descriptor"):
            desc = packet.track_descriptor
            if desc.HasField("process"):
                processes[desc.process.pid] = desc.process.process_name
            if desc.HasField("thread"):
                t = desc.thread
                known = threads.get(desc.uuid)
                if known is None:
                    threads[desc.uuid] = Thread(t.pid, t.tid, t.thread_name)
                else:
                    known.name = t.thread_name
        if packet.HasField("track_event"):
            if not seq.cleared:
                problems.append(f"sequence {seq_id}: event before incremental state was set")
                continue
            te = packet.track_event
            seq.last_ts += packet.timestamp
            track = te.track_uuid if te.HasField("track_uuid") else seq.track
            name = ""
            file, line = "", 0
            if te.type != SLICE_END:
                if te.name_iid not in seq.names:
                    problems.append(f"sequence {seq_id}: name iid {te.name_iid} not interned")
                name = seq.names.get(te.name_iid, "?")
                if te.HasField("source_location_iid"):
                    file, line = seq.locations.get(te.source_location_iid, ("?", 0))
            events.append((track, seq.last_ts, te.type, name, file, line))
    stacks: dict[int, list[Slice]] = {}
    last_ts: dict[int, int] = {}
    # trace_processor sorts events by timestamp; a stable sort keeps each track's order.
    for track, ts, kind, name, file, line in sorted(events, key=lambda e: e[1]):
        thread = threads.get(track)
        if thread is None:
            problems.append(f"event on undescribed track {track}")
            thread = threads[track] = Thread(0, 0, "?")
        if ts < last_ts.get(track, 0):
            problems.append(f"track {track}: timestamps go backwards")
        last_ts[track] = ts
        stack = stacks.setdefault(track, [])
        if kind == SLICE_BEGIN:
            s = Slice(name, ts, -1, len(stack), file, line)
            if stack:
                stack[-1].children.append(s)
            stack.append(s)
            thread.slices.append(s)
        elif kind == SLICE_END:
            if not stack:
                problems.append(f"thread {thread.name}: end without a begin")
                continue
            s = stack.pop()
            s.dur = ts - s.ts
        elif kind == INSTANT:
            thread.instants.append((ts, name))
    for track, stack in stacks.items():
        for s in stack:
            problems.append(f"thread {threads[track].name}: slice {s.name} never ended")
    return Decoded(threads, processes, problems)


def client_events(path: str | os.PathLike[str]) -> TraceModel:
    """The trace's track events written through the client API (the program's own sequences,
    which need incremental state; `decode` reads the recorder's calls)."""
    trace: Any = parse_upstream_trace(Path(path).read_bytes())
    client = {
        p.trusted_packet_sequence_id
        for p in trace.packet
        if p.HasField("track_event") and p.sequence_flags & SEQ_NEEDS_INCREMENTAL_STATE
    }
    kept = [p for p in trace.packet if p.trusted_packet_sequence_id in client]
    del trace.packet[:]
    trace.packet.extend(kept)
    return TraceModel(trace.SerializeToString())


def run_traced(
    tmp_path: Path,
    program: str,
    *args: str,
    options: tuple[str, ...] = (),
    pure: bool = False,
    timeout: float = 120,
    env: dict[str, str] | None = None,
) -> tuple[subprocess.CompletedProcess[str], Path]:
    """Writes `program` to a file and runs it under `perfetto-trace run`.

    Unless `pure` (or PERFETTO_PY_PURE=1), the compiled hook must be there: it is what runs.
    """
    if not pure and not os.environ.get("PERFETTO_PY_PURE"):
        require_compiled_hook()
    script = tmp_path / "prog.py"
    script.write_text(program)
    out = tmp_path / "out.pftrace"
    cmd = [sys.executable, "-m", "perfetto_client._tracer", "run", "-o", str(out), *options]
    if pure:
        cmd.append("--pure")
    proc = subprocess.run(
        [*cmd, str(script), *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=tmp_path,
        env={**os.environ, **(env or {})},
    )
    return proc, out


@contextlib.contextmanager
def sigint_reaches_children() -> Iterator[None]:
    """Processes started inside take Ctrl-C even when the test run ignores SIGINT (nohup).

    A child keeps an ignored signal ignored across exec, and python then keeps it so; a
    handled one is reset to its default.
    """
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def end(proc: subprocess.Popen[Any]) -> None:
    """Kills `proc` if it still runs, and reaps it."""
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def run_plain(
    tmp_path: Path, program: str, *args: str, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Runs the same program with plain python, the reference for exit codes and output."""
    script = tmp_path / "prog.py"
    script.write_text(program)
    return subprocess.run(
        [sys.executable, str(script), *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=tmp_path,
    )


def program_stderr(stderr: str) -> str:
    """stderr without perfetto-trace's own lines."""
    return "".join(
        line for line in stderr.splitlines(keepends=True) if not line.startswith("perfetto-trace: ")
    )
