"""The heap profiles of a trace (heapprofd's `ProfilePacket`s) as flame trees.

heapprofd writes, per dump, one `ProcessHeapSamples` per process and heap whose samples are
cumulative per callstack since profiling began (bytes allocated and freed, allocations and
frees); a dump may span several packets (`continued`). The last whole dump of each process and
heap is therefore its profile, as upstream's trace_processor shows the latest snapshot. Strings,
mappings, frames and callstacks come from the packet's own tables (older writers, ours) or the
sequence's `InternedData` (newer ones); both are looked up, the packet's first.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from perfetto_protos.tags.fields import (
    InternedData_build_ids_ID,
    InternedData_callstacks_ID,
    InternedData_frames_ID,
    InternedData_function_names_ID,
    InternedData_mapping_paths_ID,
    InternedData_mappings_ID,
    InternedData_source_paths_ID,
    TracePacket_incremental_state_cleared_ID,
    TracePacket_interned_data_ID,
    TracePacket_profile_packet_ID,
    TracePacket_sequence_flags_ID,
    TracePacket_SequenceFlags_SEQ_INCREMENTAL_STATE_CLEARED,
    TracePacket_trusted_packet_sequence_id_ID,
)
from perfetto_service import read_trace_file
from protozero import ProtoDecoder

from perfetto_client._tracer._heap_scan import heap_packets

if TYPE_CHECKING:
    from perfetto_protos.trace.profiling.profile_common_pb2 import Callstack, Frame, Mapping
    from perfetto_protos.trace.profiling.profile_packet_pb2 import ProfilePacket

__all__ = ["HeapNode", "HeapProfile", "HeapProfiles", "read_heap_profiles"]

# InternedData's tables that heap profiles use: (name, message in profile_common.proto).
_TABLES = {
    InternedData_function_names_ID: ("function_names", "InternedString"),
    InternedData_mapping_paths_ID: ("mapping_paths", "InternedString"),
    InternedData_source_paths_ID: ("source_paths", "InternedString"),
    InternedData_build_ids_ID: ("build_ids", "InternedString"),
    InternedData_mappings_ID: ("mappings", "Mapping"),
    InternedData_frames_ID: ("frames", "Frame"),
    InternedData_callstacks_ID: ("callstacks", "Callstack"),
}


def _module(name: str) -> Any:
    """A protobuf module, loaded when a trace has heap profiles (the report of a trace of calls
    alone does not pay for it)."""
    return importlib.import_module(name)


_FLAGS = (
    ("buffer_overran", "its ring buffer overran and samples were lost"),
    ("buffer_corrupted", "it wrote a corrupt record and was disconnected"),
    ("hit_guardrail", "heapprofd hit a guardrail and the profile is partial"),
    ("rejected_concurrent", "it was not profiled: another session profiled it"),
)


class HeapNode:
    """One frame at one call path: its totals, its callees' included."""

    def __init__(self, name: str, location: str) -> None:
        self.name = name
        self.location = location
        self.unreleased = 0
        self.allocated = 0
        self.count = 0
        self.children: dict[tuple[str, str], HeapNode] = {}

    def add(
        self, frames: list[tuple[str, str]], unreleased: int, allocated: int, count: int
    ) -> None:
        """Adds one callstack's totals (outermost frame first) under this node."""
        node = self
        node.unreleased += unreleased
        node.allocated += allocated
        node.count += count
        for key in frames:
            child = node.children.get(key)
            if child is None:
                child = node.children[key] = HeapNode(*key)
            child.unreleased += unreleased
            child.allocated += allocated
            child.count += count
            node = child


class HeapProfile:
    """The last dump of one heap of one process."""

    def __init__(self, pid: int, heap: str, sampling_interval: int) -> None:
        self.pid = pid
        self.heap = heap
        self.sampling_interval = sampling_interval
        self.root = HeapNode("", "")
        self.callstacks = 0
        self.dumps = 0
        self.complete = True  # False: its dump was cut short (the trace ends inside it)
        self.lacks: list[str] = []


class _Dump:
    """The samples of one heap of one process in the dump being read."""

    def __init__(self, pid: int, heap: str, interval: int) -> None:
        self.pid = pid
        self.heap = heap
        self.interval = interval
        self.samples: list[ProfilePacket.HeapSample] = []
        self.lacks: list[str] = []


class _Sequence:
    """What one packet sequence interned, and the dump it is writing."""

    def __init__(self) -> None:
        self.strings: dict[int, str] = {}  # the ProfilePackets' own table
        self.mappings: dict[int, Mapping] = {}
        self.frames: dict[int, Frame] = {}
        self.callstacks: dict[int, Callstack] = {}
        self.interned: dict[str, dict[int, Any]] = {name: {} for name, _ in _TABLES.values()}
        self.dump: dict[tuple[int, str], _Dump] = {}
        self.next_index = 0


class HeapProfiles:
    """Fed a trace's whole packets, keeps the last dump of each process and heap."""

    def __init__(self) -> None:
        self.profiles: dict[tuple[int, str], HeapProfile] = {}
        self.lost_packets = 0  # ProfilePackets missing from a sequence (gaps in `index`)
        self.unknown_callstacks = 0  # samples whose callstack was never interned
        self.undecodable = 0  # packets whose profile or interned data do not decode
        self.cut_dumps = 0  # later dumps the trace ends inside (the whole one before is kept)
        self._sequences: dict[int, _Sequence] = {}
        self._dumps: dict[tuple[int, str], int] = {}

    def feed(self, data: bytes, base: int) -> int:
        """Reads the whole `Trace.packet`s of `data` (file offset `base`); returns where the
        first incomplete one starts."""
        found: list[tuple[int, int]] = []
        pos = heap_packets(data, base, found)
        if not found:
            return pos
        decode_error = _module("google.protobuf.message").DecodeError
        view = memoryview(data)
        for start, stop in found:
            try:
                self._packet(view[start:stop])
            except decode_error:
                self.undecodable += 1
        return pos

    def _packet(self, packet: memoryview) -> None:
        sequence_id = 0
        cleared = False
        profile = interned = None
        for f in ProtoDecoder(packet):
            fid = f.id
            if fid == TracePacket_trusted_packet_sequence_id_ID:
                sequence_id = f.as_uint64()
            elif fid == TracePacket_profile_packet_ID:
                profile = f.as_bytes()
            elif fid == TracePacket_interned_data_ID:
                interned = f.as_bytes()
            elif fid == TracePacket_sequence_flags_ID:
                cleared |= bool(
                    f.as_uint64() & TracePacket_SequenceFlags_SEQ_INCREMENTAL_STATE_CLEARED
                )
            elif fid == TracePacket_incremental_state_cleared_ID:
                cleared |= f.as_bool()
        if profile is None and interned is None and not cleared:
            return
        sequence = self._sequences.get(sequence_id)
        if sequence is None:
            sequence = self._sequences[sequence_id] = _Sequence()
        if cleared:
            for table in sequence.interned.values():
                table.clear()
        if interned is not None:
            self._interned(sequence, interned)
        if profile is not None:
            messages = _module("perfetto_protos.trace.profiling.profile_packet_pb2")
            self._profile(sequence, messages.ProfilePacket.FromString(bytes(profile)))

    @staticmethod
    def _interned(sequence: _Sequence, data: memoryview) -> None:
        for f in ProtoDecoder(data):
            kind = _TABLES.get(f.id)
            if kind is not None:
                messages = _module("perfetto_protos.trace.profiling.profile_common_pb2")
                entry = getattr(messages, kind[1]).FromString(bytes(f.as_bytes()))
                sequence.interned[kind[0]][entry.iid] = entry

    def _profile(self, sequence: _Sequence, packet: ProfilePacket) -> None:
        if packet.index > sequence.next_index:
            self.lost_packets += packet.index - sequence.next_index
        sequence.next_index = packet.index + 1
        for s in packet.strings:
            sequence.strings[s.iid] = s.str.decode(errors="replace")
        for m in packet.mappings:
            sequence.mappings[m.iid] = m
        for fr in packet.frames:
            sequence.frames[fr.iid] = fr
        for c in packet.callstacks:
            sequence.callstacks[c.iid] = c
        for d in packet.process_dumps:
            key = (d.pid, d.heap_name)
            dump = sequence.dump.get(key)
            if dump is None:
                dump = sequence.dump[key] = _Dump(d.pid, d.heap_name, d.sampling_interval_bytes)
            dump.samples.extend(d.samples)
            for flag, text in _FLAGS:
                if getattr(d, flag) and text not in dump.lacks:
                    dump.lacks.append(text)
        if not packet.continued:
            for key, dump in sequence.dump.items():
                self._keep(sequence, dump, complete=True)
                self._dumps[key] = self._dumps.get(key, 0) + 1
            sequence.dump = {}

    def finish(self) -> None:
        """Keeps the dumps the trace ends inside (marked incomplete) where no whole one was."""
        for sequence in self._sequences.values():
            for key, dump in sequence.dump.items():
                if key not in self.profiles:
                    self._keep(sequence, dump, complete=False)
                else:
                    self.cut_dumps += 1
            sequence.dump = {}

    def _keep(self, sequence: _Sequence, dump: _Dump, complete: bool) -> None:
        profile = HeapProfile(dump.pid, dump.heap, dump.interval)
        profile.dumps = self._dumps.get((dump.pid, dump.heap), 0) + 1
        profile.complete = complete
        profile.lacks = dump.lacks
        stacks: dict[int, list[tuple[str, str]] | None] = {}
        for sample in dump.samples:
            iid = sample.callstack_id
            if iid not in stacks:
                stacks[iid] = self._callstack(sequence, iid)
            frames = stacks[iid]
            if frames is None:
                self.unknown_callstacks += 1
                frames = [("<unknown callstack>", "")]
            if sample.self_max or sample.self_max_count:  # dump_at_max: the state at the peak
                unreleased, allocated, count = (
                    sample.self_max,
                    sample.self_max,
                    sample.self_max_count,
                )
            else:
                unreleased = sample.self_allocated - sample.self_freed
                allocated, count = sample.self_allocated, sample.alloc_count
            profile.root.add(frames, unreleased, allocated, count)
        profile.callstacks = len(stacks)
        self.profiles[dump.pid, dump.heap] = profile

    def _callstack(self, sequence: _Sequence, iid: int) -> list[tuple[str, str]] | None:
        callstack = sequence.callstacks.get(iid) or sequence.interned["callstacks"].get(iid)
        if callstack is None:
            return None
        return [self._frame(sequence, fid) for fid in callstack.frame_ids]

    def _frame(self, sequence: _Sequence, iid: int) -> tuple[str, str]:
        """(function, where): a Python frame's file:line, a native one's library."""
        frame = sequence.frames.get(iid) or sequence.interned["frames"].get(iid)
        if frame is None:
            return ("<unknown frame>", "")
        mapping = self._mapping(sequence, frame.mapping_id)
        source = self._string(sequence, "source_paths", frame.source_path_iid)
        name = self._string(sequence, "function_names", frame.function_name_id)
        if source:
            where = f"{source}:{frame.line_number}" if frame.line_number else source
        else:
            where = f"{mapping}+{frame.rel_pc:#x}" if mapping else ""
        return (name or f"{mapping.rsplit('/', 1)[-1] or '?'}+{frame.rel_pc:#x}", where)

    def _mapping(self, sequence: _Sequence, iid: int) -> str:
        mapping = sequence.mappings.get(iid) or sequence.interned["mappings"].get(iid)
        if mapping is None:
            return ""
        parts = [self._string(sequence, "mapping_paths", p) for p in mapping.path_string_ids]
        return "/" + "/".join(parts)

    @staticmethod
    def _string(sequence: _Sequence, table: str, iid: int) -> str:
        if not iid:
            return ""
        text = sequence.strings.get(iid)
        if text is not None:
            return text
        entry = sequence.interned[table].get(iid)
        return "" if entry is None else str(entry.str.decode(errors="replace"))

    def notes(self) -> list[str]:
        """What the heap profiles lack, one line each."""
        lines = []
        for profile in self.profiles.values():
            what = f"pid {profile.pid} heap {profile.heap or '?'}"
            if not profile.complete:
                lines.append(
                    f"{what}: the trace ends inside its only dump, drawn as far as it goes"
                )
            lines += [f"{what}: {text}" for text in profile.lacks]
        if self.cut_dumps:
            lines.append(
                f"the trace ends inside a later dump of {self.cut_dumps:,} heaps: their last"
                " whole dump is drawn"
            )
        if self.undecodable:
            lines.append(f"{self.undecodable:,} packets with heap profile data do not decode")
        if self.lost_packets:
            lines.append(f"{self.lost_packets:,} heap profile packets were lost")
        if self.unknown_callstacks:
            lines.append(
                f"{self.unknown_callstacks:,} heap samples name a callstack never interned"
            )
        return lines


def read_heap_profiles(path: str) -> HeapProfiles:
    """The heap profiles of the trace at `path` (raises `TraceFileError`); a truncated file
    gives what came before the cut."""
    heaps = HeapProfiles()
    read_trace_file(path, heaps.feed)
    heaps.finish()
    return heaps


def heap_json(heaps: HeapProfiles) -> list[dict[str, Any]]:
    """Each profile's totals, biggest unreleased first, as `report --json` prints them."""
    profiles = sorted(heaps.profiles.values(), key=lambda p: (-p.root.unreleased, p.pid, p.heap))
    return [
        {
            "pid": p.pid,
            "heap": p.heap,
            "unreleased_bytes": p.root.unreleased,
            "allocated_bytes": p.root.allocated,
            "allocations": p.root.count,
            "callstacks": p.callstacks,
            "dumps": p.dumps,
            "sampling_interval_bytes": p.sampling_interval,
            "complete": p.complete,
        }
        for p in profiles
    ]


def format_heaps(profiles: list[dict[str, Any]], notes: list[str]) -> list[str]:
    """The text report's lines on the heap profiles (`heap_json`'s) and what they lack."""
    out = [
        "",
        "Heap profiles (each one's last dump: totals since profiling began):",
        f"{'PID':>8}  {'HEAP':<16} {'UNRELEASED B':>14} {'ALLOCATED B':>14} "
        f"{'ALLOCATIONS':>12} {'CALLSTACKS':>10} {'DUMPS':>5}",
    ]
    for p in profiles:
        out.append(
            f"{p['pid']:>8}  {p['heap']:<16} {p['unreleased_bytes']:>14,} "
            f"{p['allocated_bytes']:>14,} {p['allocations']:>12,} {p['callstacks']:>10,} "
            f"{p['dumps']:>5}"
        )
    return out + notes
