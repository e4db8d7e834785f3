"""ProfilePackets from bookkeeping, parsed with upstream's schema."""

from __future__ import annotations

from typing import Any

from heapprofd._bookkeeping import HeapTracker, ProcessState
from heapprofd._dump import DumpState
from perfetto_protos.upstream import parse_upstream_trace
from protozero import encode_varint


def _trace(packets: list[bytes]) -> Any:
    framed = b"".join(b"\x0a" + encode_varint(len(p)) + p for p in packets)
    return parse_upstream_trace(framed)


def _process(callstacks: int) -> ProcessState:
    state = ProcessState(pid=42, from_startup=True, connection_id=1)
    state.frames = {1: ("main", "/srv/app.py", 3), 2: ("work", "/srv/app.py", 10)}
    heap = state.heaps[1] = HeapTracker("python", 4096)
    for cs in range(1, callstacks + 1):
        state.callstacks[cs] = (1, 2) if cs == 1 else (1, 2, 1000 + cs)
        state.frames[1000 + cs] = (f"f{cs}", "/srv/app.py", cs)
        heap.malloc(cs, 0x1000 + cs, 4096)
    heap.free(0x1001)
    return state


def test_a_dump_interns_its_tables_and_totals_callstacks() -> None:
    packets: list[bytes] = []
    dump = DumpState(packets.append, dump_at_max=False)
    state = _process(2)
    dump.dump([state])
    dump.dump([state])  # the second dump references what the first defined
    trace = _trace(packets)
    first, second = (p.profile_packet for p in trace.packet)
    assert len(first.frames) == 3
    assert len(second.frames) == 0
    assert len(second.strings) == 0
    strings = {s.iid: s.str.decode() for s in first.strings}
    frames = {f.iid: f for f in first.frames}
    stacks = {c.iid: list(c.frame_ids) for c in first.callstacks}
    samples = second.process_dumps[0].samples
    by_leaf = {strings[frames[stacks[s.callstack_id][-1]].function_name_id]: s for s in samples}
    assert by_leaf["work"].self_allocated == by_leaf["work"].self_freed == 4096
    assert by_leaf["f2"].self_freed == 0
    leaf = frames[stacks[by_leaf["work"].callstack_id][-1]]
    assert (leaf.line_number, leaf.rel_pc) == (10, 10)
    assert strings[leaf.source_path_iid] == "/srv/app.py"
    mapping = first.mappings[0]
    assert [strings[i] for i in mapping.path_string_ids] == ["srv", "app.py"]
    assert second.process_dumps[0].from_startup
    assert [p.profile_packet.index for p in trace.packet] == [0, 1]


def test_a_large_dump_continues_in_further_packets() -> None:
    packets: list[bytes] = []
    DumpState(packets.append, dump_at_max=False).dump([_process(40_000)])
    trace = _trace(packets)
    profiles = [p.profile_packet for p in trace.packet]
    assert len(profiles) > 1
    assert [p.continued for p in profiles] == [True] * (len(profiles) - 1) + [False]
    assert [p.index for p in profiles] == list(range(len(profiles)))
    assert sum(len(d.samples) for p in profiles for d in p.process_dumps) == 40_000
    assert all(d.pid == 42 for p in profiles for d in p.process_dumps)


def test_dump_at_max_reports_the_peak() -> None:
    packets: list[bytes] = []
    state = ProcessState(pid=7, from_startup=False, connection_id=1)
    state.frames = {1: ("main", "a.py", 1)}
    state.callstacks = {1: (1,)}
    heap = state.heaps[1] = HeapTracker("python", 1, track_max=True)
    heap.malloc(1, 0x10, 100)
    heap.free(0x10)
    DumpState(packets.append, dump_at_max=True).dump([state])
    sample = _trace(packets).packet[0].profile_packet.process_dumps[0].samples[0]
    assert (sample.self_max, sample.self_max_count, sample.self_allocated) == (100, 1, 0)
