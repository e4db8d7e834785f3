"""`perfetto-trace report FILE`: its figures against a program with known calls and sleeps, and
against the same trace decoded with upstream's schema (tracer_support.decode)."""

from __future__ import annotations

import json
import subprocess
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from tracer_support import BIN, Slice, decode, run_traced

PERFETTO_TRACE = str(BIN / "perfetto-trace")

PROGRAM = """\
import time

def leaf():
    time.sleep(0.02)

def middle():
    for _ in range(3):
        leaf()

def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)

def main():
    for _ in range(2):
        middle()
    fib(12)

main()
"""


def _report(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PERFETTO_TRACE, "report", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp_path = tmp_path_factory.mktemp("report")
    proc, out = run_traced(tmp_path, PROGRAM)
    assert proc.returncode == 0, proc.stderr
    return out


def _json_report(trace: Path, limit: int = 1000) -> dict[str, Any]:
    proc = _report("--json", "--limit", str(limit), str(trace), cwd=trace.parent.parent)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    report: dict[str, Any] = json.loads(proc.stdout)
    return report


def test_the_figures_are_those_of_the_program(recorded: Path) -> None:
    report = _json_report(recorded)
    functions = {f["name"]: f for f in report["functions_by_total"]}
    assert functions["leaf"]["calls"] == 6
    assert functions["middle"]["calls"] == 2
    assert functions["main"]["calls"] == 1
    assert functions["fib"]["calls"] == 465  # fib(12): 2 * fib(13) - 1
    [sleep] = [f for f in functions.values() if f["name"].endswith("sleep")]
    assert sleep["calls"] == 6
    assert sleep["total_ns"] >= 6 * 20_000_000
    assert sleep["self_ns"] == sleep["total_ns"]  # it calls nothing recorded
    leaf, middle, main, fib = (functions[n] for n in ("leaf", "middle", "main", "fib"))
    assert leaf["self_ns"] == leaf["total_ns"] - sleep["total_ns"]  # sleep is all it calls
    assert leaf["total_ns"] < middle["total_ns"] < main["total_ns"]
    assert main["total_ns"] >= middle["total_ns"] + fib["total_ns"]
    # Recursion is counted once: fib's total is its one outermost call, not the sum.
    assert fib["total_ns"] == fib["max_ns"]
    assert fib["self_ns"] > fib["total_ns"] // 2
    assert fib["location"].endswith("prog.py:10")
    assert report["threads"] == 1
    assert report["unfinished_calls"] == report["ends_without_begin"] == 0
    assert report["calls"] == sum(f["calls"] for f in report["functions_by_total"])
    assert {f["name"] for f in report["functions_by_self"]} == set(functions)


def _walk(slices: list[Slice], inside: frozenset[str], out: dict[str, list[int]]) -> None:
    for s in slices:
        calls, total, self_ns, longest = out[s.name]
        out[s.name] = [
            calls + 1,
            total + (s.dur if s.name not in inside else 0),
            self_ns + s.dur - sum(c.dur for c in s.children),
            max(longest, s.dur),
        ]
        _walk(s.children, inside | {s.name}, out)


def test_the_figures_match_the_trace_decoded_with_upstreams_schema(recorded: Path) -> None:
    decoded = decode(recorded)
    assert decoded.problems == []
    expected: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    durations = []
    for thread in decoded.threads.values():
        _walk(thread.roots(), frozenset(), expected)
        durations += [s.dur for s in thread.slices]
    report = _json_report(recorded)
    got = {
        f["name"]: [f["calls"], f["total_ns"], f["self_ns"], f["max_ns"]]
        for f in report["functions_by_total"]
    }
    assert got == dict(expected)
    slowest = [c["duration_ns"] for c in _json_report(recorded, limit=5)["slowest_calls"]]
    assert slowest == sorted(durations, reverse=True)[:5]


def test_the_table_from_another_directory(recorded: Path, tmp_path: Path) -> None:
    proc = _report(str(recorded), "--limit", "3", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith(f"{recorded}: ")
    assert " calls on 1 thread, spanning " in lines[0]
    for title in (
        "Functions by total time (top 3):",
        "Functions by self time (top 3):",
        "Slowest calls (top 3):",
    ):
        at = lines.index(title)
        rows = lines[at + 2 : at + 5]
        assert len(rows) == 3
        assert all(row.strip() for row in rows)
        after = lines[at + 5].split() if at + 5 < len(lines) else []
        if title.startswith("Functions"):  # the rest counted in one line
            functions = json.loads(_report(str(recorded), "--json", cwd=tmp_path).stdout)
            assert after == ["...", f"{functions['functions'] - 3:,}", "more", "functions"]
        else:
            assert after == []
    by_self = lines[lines.index("Functions by self time (top 3):") + 2 :][:3]
    assert any(row.split()[0] == "6" and row.split()[4].endswith("sleep") for row in by_self)


def test_calls_still_running_when_the_program_was_killed_are_counted_and_said(
    tmp_path: Path,
) -> None:
    proc, out = run_traced(
        tmp_path,
        "import os, signal\n"
        "def deep(n):\n"
        "    if n:\n"
        "        return deep(n - 1)\n"
        "    for i in range(200_000):\n"  # some MB of calls: whole buffers reach the file
        "        abs(i)\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "deep(5)\n",
    )
    assert proc.returncode == -9
    never_ended = [p for p in decode(out).problems if "never ended" in p]
    assert len(never_ended) >= 7  # <module>, deep x 6: upstream's schema sees them open
    report = _json_report(out)
    assert report["unfinished_calls"] == len(never_ended)
    assert {f["name"]: f["calls"] for f in report["functions_by_total"]}["abs"] > 0
    text = _report(str(out), cwd=tmp_path)
    assert text.returncode == 0
    assert (
        f"{len(never_ended)} calls had not returned when the trace ended (the program was "
        "stopped?): they are not counted above"
    ) in text.stdout


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "{path} is not a Perfetto trace (the file is empty)"),
        (
            b"hello\n",
            "{path} is not a Perfetto trace (it begins with byte 0x68, not a TracePacket)",
        ),
        (
            b"\x0a\x04\x5a\x09\x48\x01",
            "{path} is corrupt: the packet at offset 0: a field runs past its end",
        ),
        (
            b"\x0a\x02\x40\x01\x0a\x07\x40",
            "{path} is truncated: the packet at offset 4 ends past the end of the file",
        ),
    ],
)
def test_a_bad_file_is_one_line_and_exit_1(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "bad.pftrace"
    path.write_bytes(content)
    proc = _report(str(path), cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert proc.stderr.count("\n") == 1
    assert proc.stderr.startswith("perfetto-trace: " + message.format(path=path))


def test_a_truncated_trace_is_one_line_and_exit_1(recorded: Path, tmp_path: Path) -> None:
    cut = tmp_path / "cut.pftrace"
    cut.write_bytes(recorded.read_bytes()[:-3])
    proc = _report(str(cut), cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert proc.stderr.startswith(f"perfetto-trace: {cut} is truncated: the packet at offset ")
    assert proc.stderr.count("\n") == 1


def test_a_missing_file_and_a_bad_limit_are_one_line(tmp_path: Path) -> None:
    proc = _report(str(tmp_path / "nope.pftrace"), cwd=tmp_path)
    assert (proc.returncode, proc.stderr) == (
        1,
        f"perfetto-trace: cannot read {tmp_path / 'nope.pftrace'}: No such file or directory\n",
    )
    proc = _report("--limit", "0", "x.pftrace", cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stderr == (
        "perfetto-trace: argument --limit: --limit takes a positive integer, not '0' "
        "(see perfetto-trace report --help)\n"
    )


def test_slices_nest_within_their_own_sequence(tmp_path: Path) -> None:
    """The file holds each sequence in time order, not the sequences: an event of another
    sequence on the same track (the program's own track events beside its calls) written
    while an unrelated call is open is not that call's child."""
    from perfetto_protos.upstream import upstream_message_class

    trace: Any = upstream_message_class("perfetto.protos.Trace")()

    def event(
        seq: int, ts: int, kind: int, iid: int = 0, names: dict[int, str] | None = None
    ) -> None:
        packet = trace.packet.add()
        packet.trusted_packet_sequence_id = seq
        packet.timestamp = ts
        if names is not None:
            packet.sequence_flags = 1  # SEQ_INCREMENTAL_STATE_CLEARED
            for name_iid, name in names.items():
                packet.interned_data.event_names.add(iid=name_iid, name=name)
        packet.track_event.type = kind
        packet.track_event.track_uuid = 7
        if iid:
            packet.track_event.name_iid = iid

    event(1, 100, 1, 1, {1: "a", 2: "b"})
    event(1, 200, 2)
    event(1, 300, 1, 2)
    event(2, 150, 1, 1, {1: "event"})  # inside a, written while b is open
    event(2, 160, 2)
    event(1, 400, 2)
    path = tmp_path / "two-sequences.pftrace"
    path.write_bytes(trace.SerializeToString())
    report = _json_report(path)
    got = {
        f["name"]: (f["calls"], f["total_ns"], f["self_ns"]) for f in report["functions_by_total"]
    }
    assert got == {"a": (1, 100, 100), "b": (1, 100, 100), "event": (1, 10, 10)}
    assert report["threads"] == 1
    assert report["unfinished_calls"] == report["ends_without_begin"] == 0


def test_a_loss_is_said_but_not_the_mark_on_each_sequences_first_packet(tmp_path: Path) -> None:
    from perfetto_protos.upstream import upstream_message_class

    trace: Any = upstream_message_class("perfetto.protos.Trace")()
    for seq, dropped in ((1, 1), (2, 1), (1, 0), (1, 1), (2, 0)):
        packet = trace.packet.add(trusted_packet_sequence_id=seq, timestamp=seq)
        packet.previous_packet_dropped = dropped  # traced sets it on each sequence's first
    path = tmp_path / "lossy.pftrace"
    path.write_bytes(trace.SerializeToString())
    assert _json_report(path)["packets_after_loss"] == 1
    text = _report(str(path), cwd=tmp_path).stdout
    assert text.endswith("\n1 packets follow data lost on their sequence\n")
