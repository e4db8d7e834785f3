"""Heap profiles in `perfetto-trace report`: the last whole dump of each process and heap,
dumps split over packets, and traces that end inside a dump (text, JSON and the page)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from perfetto_client._tracer._heap_tree import read_heap_profiles
from perfetto_protos.trace.trace_packet_pb2 import TracePacket
from perfetto_testing import open_page
from tracer_support import BIN, run_traced

PERFETTO_TRACE = str(BIN / "perfetto-trace")


def _packet(index: int, continued: bool, samples: list[tuple[int, int, int, int]]) -> bytes:
    """A ProfilePacket of pid 42's heap "python" on sequence 7: (callstack, allocated, freed,
    allocations) samples; the first also interns main() -> alloc() in /src/a.py."""
    packet = TracePacket()
    packet.trusted_packet_sequence_id = 7
    profile = packet.profile_packet
    if index == 0:
        for iid, text in enumerate(["main", "alloc", "src", "a.py", "/src/a.py"], 1):
            profile.strings.add(iid=iid, str=text.encode())
        profile.mappings.add(iid=1, path_string_ids=[3, 4])
        profile.frames.add(
            iid=1, function_name_id=1, mapping_id=1, source_path_iid=5, line_number=3
        )
        profile.frames.add(
            iid=2, function_name_id=2, mapping_id=1, source_path_iid=5, line_number=7
        )
        profile.callstacks.add(iid=1, frame_ids=[1, 2])
        profile.callstacks.add(iid=2, frame_ids=[1])
    dump = profile.process_dumps.add(pid=42, heap_name="python", sampling_interval_bytes=4096)
    for callstack, allocated, freed, count in samples:
        dump.samples.add(
            callstack_id=callstack, self_allocated=allocated, self_freed=freed, alloc_count=count
        )
    profile.continued = continued
    profile.index = index
    data = packet.SerializeToString()
    return b"\x0a" + _varint(len(data)) + data


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    return bytes(out + bytes([value]))


FIRST = [_packet(0, True, [(1, 5000, 1000, 5)]), _packet(1, False, [(2, 300, 0, 3)])]
SECOND = [_packet(2, True, [(1, 9000, 1000, 9)]), _packet(3, False, [(2, 300, 100, 3)])]


def _trace(tmp_path: Path, packets: list[bytes], cut: int = 0) -> Path:
    data = b"".join(packets)
    path = tmp_path / "heap.pftrace"
    path.write_bytes(data[: len(data) - cut])
    return path


def test_a_dump_over_two_packets_is_one_profile(tmp_path: Path) -> None:
    heaps = read_heap_profiles(str(_trace(tmp_path, FIRST)))
    [profile] = heaps.profiles.values()
    assert (profile.pid, profile.heap, profile.dumps, profile.complete) == (42, "python", 1, True)
    root = profile.root
    assert (root.unreleased, root.allocated, root.count) == (4300, 5300, 8)
    main = root.children["main", "/src/a.py:3"]
    assert main.unreleased == 4300
    assert main.children["alloc", "/src/a.py:7"].unreleased == 4000
    assert heaps.notes() == []


def test_the_last_whole_dump_is_the_profile(tmp_path: Path) -> None:
    heaps = read_heap_profiles(str(_trace(tmp_path, FIRST + SECOND)))
    [profile] = heaps.profiles.values()
    assert (profile.root.unreleased, profile.root.allocated, profile.dumps) == (8200, 9300, 2)
    # the trace ends inside the second dump: the first is drawn, and that is said
    heaps = read_heap_profiles(str(_trace(tmp_path, FIRST + SECOND[:1])))
    [profile] = heaps.profiles.values()
    assert profile.root.unreleased == 4300
    assert heaps.notes() == [
        "the trace ends inside a later dump of 1 heaps: their last whole dump is drawn"
    ]


def test_the_text_and_json_reports_say_what_the_trace_holds(tmp_path: Path) -> None:
    trace = _trace(tmp_path, FIRST + SECOND)
    text = subprocess.run(
        [PERFETTO_TRACE, "report", str(trace)], capture_output=True, text=True, check=True
    ).stdout
    assert text.splitlines()[0] == f"{trace}: 0 calls on 0 threads, spanning 0.000 s"
    assert "Functions by total time" not in text
    assert text.splitlines()[-1].split() == ["42", "python", "8,200", "9,300", "12", "2", "2"]
    report = json.loads(
        subprocess.run(
            [PERFETTO_TRACE, "report", "--json", str(trace)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    assert report["heap_profiles"] == [
        {
            "pid": 42,
            "heap": "python",
            "unreleased_bytes": 8200,
            "allocated_bytes": 9300,
            "allocations": 12,
            "callstacks": 2,
            "dumps": 2,
            "sampling_interval_bytes": 4096,
            "complete": True,
        }
    ]
    assert report["heap_profile_notes"] == []


def test_a_trace_cut_inside_its_only_dump_gives_a_page_marked_incomplete(tmp_path: Path) -> None:
    trace = _trace(tmp_path, FIRST, cut=3)
    html = tmp_path / "cut.html"
    proc = subprocess.run(
        [PERFETTO_TRACE, "report", "--html", str(html), str(trace)],
        capture_output=True, text=True, check=False, cwd=tmp_path.parent,
    )  # fmt: skip
    assert proc.returncode == 1
    assert f"perfetto-trace: wrote {html} (marked incomplete)\n" in proc.stderr
    with open_page(html) as opened:
        opened.page.wait_for_selector("body[data-rendered]")
        banner = opened.page.locator("#incomplete").inner_text()
        assert "is truncated" in banner
        assert "pid 42 heap python: the trace ends inside its only dump" in banner
        assert opened.page.locator("#stack option:checked").inner_text() == "heap python of pid 42"
        top = opened.page.locator("#flame .frame").first.get_attribute("data-total")
        assert top == "4000"  # what came before the cut: main -> alloc's 5,000 - 1,000
        assert opened.errors == []
        assert opened.network == []


def test_a_trace_of_calls_and_heaps_shows_both(tmp_path: Path) -> None:
    # work() spends its time in Python, so that it fills most of the flame graph at any load
    # (a frame narrower than 30 px shows no name)
    work = "def work():\n    n = 0\n    for i in range(300_000):\n        n += i\n\nwork()\n"
    proc, calls = run_traced(tmp_path, work)
    assert proc.returncode == 0, proc.stderr
    both = tmp_path / "both.pftrace"
    both.write_bytes(calls.read_bytes() + b"".join(FIRST))  # a trace is its packets, in a row
    html = tmp_path / "both.html"
    proc = subprocess.run(
        [PERFETTO_TRACE, "report", "--html", str(html), str(both)],
        capture_output=True, text=True, check=False, cwd=tmp_path.parent,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    with open_page(html) as opened:
        page = opened.page
        page.wait_for_selector("body[data-rendered]")
        options = page.locator("#stack option").all_inner_texts()
        assert options[0].startswith("all threads")
        assert options[-1] == "heap python of pid 42"
        assert page.locator("#metric").is_hidden()
        assert page.locator("#timeline .slice").count() >= 1
        assert page.locator('#flame .frame[data-name="work"]').inner_text() == "work"
        page.select_option("#stack", label="heap python of pid 42")
        assert page.locator("#metric").is_visible()
        assert page.locator("#flame .frame").first.get_attribute("data-total") == "4300"
        assert opened.errors == []
        assert opened.network == []
