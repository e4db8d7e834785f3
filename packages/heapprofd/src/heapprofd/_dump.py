"""Turns bookkeeping into `ProfilePacket`s: interned strings, mappings, frames, callstacks
and one `ProcessHeapSamples` per process and heap, split across packets when large."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from perfetto_protos.trace.profiling.profile_common_pb2 import Mapping
from perfetto_protos.trace.profiling.profile_packet_pb2 import ProfilePacket
from perfetto_protos.trace.trace_packet_pb2 import TracePacket

from heapprofd._bookkeeping import HeapTracker, ProcessState, monotonic_coarse_ns

__all__ = ["PACKET_SIZE_THRESHOLD", "DumpState"]

PACKET_SIZE_THRESHOLD = 400_000
"""Bytes after which a dump continues in a new packet (upstream's threshold)."""

UNKNOWN = ("<unknown>", "<unknown>", 0)


class DumpState:
    """The interning state of one data source instance's trace writer."""

    def __init__(self, write: Callable[[bytes], None], dump_at_max: bool) -> None:
        self._write = write
        self._dump_at_max = dump_at_max
        self._strings: dict[str, int] = {}
        self._mappings: dict[str, int] = {}
        self._frames: dict[tuple[str, str, int], int] = {}
        self._native_mappings: dict[tuple[str, str, int, int, int], int] = {}
        self._native_frames: dict[tuple[str, tuple[str, str, int, int, int], int], int] = {}
        self._callstacks: dict[tuple[int, ...], int] = {}
        self._process_callstacks: dict[tuple[int, int], int] = {}
        self._index = 0
        self._packet = ProfilePacket()
        self._size = 0

    def dump(self, processes: Iterable[ProcessState], guardrail: bool = False) -> None:
        """Writes one dump of every heap of every process."""
        timestamp = monotonic_coarse_ns()
        for process in processes:
            if not process.heaps:
                self._process_dump(process, None, timestamp, guardrail)
            for tracker in process.heaps.values():
                if tracker.interval == 0 and not tracker.callstacks:
                    continue
                samples = [
                    (self._callstack(process, cs), totals)
                    for cs, totals in tracker.callstacks.items()
                ]
                dump = self._process_dump(process, tracker, timestamp, guardrail)
                for iid, totals in samples:
                    sample = dump.samples.add()
                    sample.callstack_id = iid
                    if self._dump_at_max:
                        sample.self_max = totals.max
                        sample.self_max_count = totals.max_count
                    else:
                        sample.self_allocated = totals.allocated
                        sample.self_freed = totals.freed
                        sample.alloc_count = totals.alloc_count
                        sample.free_count = totals.free_count
                    self._size += 24
                    if self._size > PACKET_SIZE_THRESHOLD:
                        self._emit(continued=True)
                        dump = self._packet.process_dumps.add()
                        dump.pid = process.pid
                        dump.heap_name = tracker.name
                        dump.timestamp = timestamp
        if self._packet.process_dumps:
            self._emit(continued=False)

    def _process_dump(
        self,
        process: ProcessState,
        tracker: HeapTracker | None,
        timestamp: int,
        guardrail: bool,
    ) -> ProfilePacket.ProcessHeapSamples:
        dump = self._packet.process_dumps.add()
        dump.pid = process.pid
        dump.from_startup = process.from_startup
        dump.rejected_concurrent = process.rejected_concurrent
        dump.disconnected = process.disconnected
        dump.buffer_overran = process.buffer_overran
        dump.buffer_corrupted = process.buffer_corrupted
        # upstream's flag for a profile a daemon bound cut short: its memory, or heaps refused
        dump.hit_guardrail = process.hit_guardrail or guardrail or process.refused_heap_records > 0
        if process.client_error:
            dump.client_error = process.client_error  # type: ignore[assignment]
        dump.timestamp = timestamp
        dump.start_timestamp = process.start_timestamp
        dump.stats.unwinding_errors = process.unwinding_errors
        dump.stats.client_spinlock_blocked_us = process.spinlock_blocked_us
        if tracker is not None:
            dump.heap_name = tracker.name
            dump.sampling_interval_bytes = tracker.interval
            dump.orig_sampling_interval_bytes = tracker.interval
            dump.stats.heap_samples = tracker.samples
        self._size += 64
        return dump

    def _emit(self, continued: bool) -> None:
        packet = TracePacket()
        packet.timestamp = time.clock_gettime_ns(time.CLOCK_BOOTTIME)
        self._packet.index = self._index
        self._index += 1
        if continued:
            self._packet.continued = True
        packet.profile_packet.CopyFrom(self._packet)
        self._write(packet.SerializeToString())
        self._packet = ProfilePacket()
        self._size = 0

    def _string(self, value: str) -> int:
        iid = self._strings.get(value)
        if iid is None:
            iid = self._strings[value] = len(self._strings) + 1
            entry = self._packet.strings.add()
            entry.iid = iid
            entry.str = value.encode()
            self._size += 8 + len(value)
        return iid

    def _mapping(self, path: str) -> int:
        iid = self._mappings.get(path)
        if iid is None:
            iid = self._mappings[path] = self._add_mapping(path).iid
        return iid

    def _add_mapping(self, path: str) -> Mapping:
        parts = [self._string(part) for part in path.split("/") if part] or [self._string(path)]
        mapping = self._packet.mappings.add()
        mapping.iid = len(self._mappings) + len(self._native_mappings) + 1
        mapping.path_string_ids.extend(parts)
        self._size += 8 + 2 * len(parts)
        return mapping

    def _native_mapping(self, key: tuple[str, str, int, int, int]) -> int:
        """A /proc/PID/maps entry: path, build id, start, end and file offset."""
        iid = self._native_mappings.get(key)
        if iid is None:
            path, build_id, start, end, offset = key
            mapping = self._add_mapping(path)
            if build_id:
                mapping.build_id = self._string(build_id)
            mapping.start = start
            mapping.end = end
            mapping.exact_offset = offset
            mapping.start_offset = offset
            iid = self._native_mappings[key] = mapping.iid
            self._size += 32
        return iid

    def _native_frame(self, content: tuple[str, tuple[str, str, int, int, int], int]) -> int:
        iid = self._native_frames.get(content)
        if iid is None:
            function, mapping, rel_pc = content
            frame = self._packet.frames.add()
            frame.iid = iid = len(self._frames) + len(self._native_frames) + 1
            if function:
                frame.function_name_id = self._string(function)
            frame.mapping_id = self._native_mapping(mapping)
            frame.rel_pc = rel_pc
            self._native_frames[content] = iid
            self._size += 24
        return iid

    def _frame(self, content: tuple[str, str, int]) -> int:
        iid = self._frames.get(content)
        if iid is None:
            function, path, line = content
            name_id = self._string(function)
            mapping_id = self._mapping(path)
            source_id = self._string(path)
            iid = self._frames[content] = len(self._frames) + len(self._native_frames) + 1
            frame = self._packet.frames.add()
            frame.iid = iid
            frame.function_name_id = name_id
            frame.mapping_id = mapping_id
            frame.rel_pc = line
            frame.source_path_iid = source_id
            frame.line_number = line
            self._size += 24
        return iid

    def _callstack(self, process: ProcessState, client_cs: int) -> int:
        key = (process.connection_id, client_cs)
        iid = self._process_callstacks.get(key)
        if iid is not None:
            return iid
        frames = process.frames
        native = process.native_frames
        stack = tuple(
            self._native_frame(native[fid])
            if fid in native
            else self._frame(frames.get(fid, UNKNOWN))
            for fid in process.callstacks[client_cs]
        )
        iid = self._callstacks.get(stack)
        if iid is None:
            iid = self._callstacks[stack] = len(self._callstacks) + 1
            callstack = self._packet.callstacks.add()
            callstack.iid = iid
            callstack.frame_ids.extend(stack)
            self._size += 8 + 2 * len(stack)
        self._process_callstacks[key] = iid
        return iid
