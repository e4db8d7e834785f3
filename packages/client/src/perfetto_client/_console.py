"""The console interceptor: track events printed live, for a user without the UI.

A session enables it per data source with `interceptor_config { name: "console" }`: that
instance's packets go to a `ConsoleSink` per thread instead of the session's buffer. Each
sink decodes the packets of its sequence (interning and incremental timestamps included)
and prints one line per event, indented by slice depth.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Any, TextIO

from perfetto_protos.trace.trace_packet_pb2 import TracePacket

__all__ = ["CONSOLE_INTERCEPTOR", "ConsoleSink"]

CONSOLE_INTERCEPTOR = "console"
_OUTPUT_STDOUT = 1
_CLOCK_INCREMENTAL = 64
_lock = threading.Lock()


def _annotation(ann: Any, names: dict[int, str]) -> tuple[str, object]:
    name = names.get(ann.name_iid, "?") if ann.HasField("name_iid") else ann.name
    kind = ann.WhichOneof("value")
    if kind is not None and kind not in ("nested_value", "pointer_value"):
        return name, getattr(ann, kind)
    if ann.dict_entries:
        return name, dict(_annotation(e, names) for e in ann.dict_entries)
    if ann.array_values:
        return name, [_annotation(e, names)[1] for e in ann.array_values]
    return name, None


class ConsoleSink:
    """Stands in for a TraceWriter: decodes a sequence's packets and prints its events."""

    def __init__(self, start_ns: int, output: int = 0, stream: TextIO | None = None) -> None:
        self._start = start_ns
        self._stream = stream
        self.on_resume: Callable[[], None] | None = None
        """Unused: the console prints every event, it never drops and resumes."""
        self._stdout = output == _OUTPUT_STDOUT
        self._names: dict[int, str] = {}
        self._categories: dict[int, str] = {}
        self._annotation_names: dict[int, str] = {}
        self._tracks: dict[int, str] = {}
        self._default_track = 0
        self._last_ts = 0
        self._stacks: dict[int, list[tuple[str, int]]] = {}

    def write_packet(self, data: bytes) -> None:
        """Decodes one packet and prints the event it holds, if any."""
        packet = TracePacket.FromString(data)
        if packet.sequence_flags & 1:
            self._names.clear()
            self._categories.clear()
            self._annotation_names.clear()
        if packet.HasField("trace_packet_defaults"):
            self._default_track = packet.trace_packet_defaults.track_event_defaults.track_uuid
        if packet.HasField("interned_data"):
            interned = packet.interned_data
            self._names.update({e.iid: e.name for e in interned.event_names})
            self._categories.update({e.iid: e.name for e in interned.event_categories})
            self._annotation_names.update({e.iid: e.name for e in interned.debug_annotation_names})
        if packet.HasField("clock_snapshot"):
            for clock in packet.clock_snapshot.clocks:
                if clock.clock_id == _CLOCK_INCREMENTAL:
                    self._last_ts = clock.timestamp
        if packet.HasField("track_descriptor"):
            desc = packet.track_descriptor
            label = desc.thread.thread_name if desc.HasField("thread") else desc.name
            self._tracks[desc.uuid] = label or desc.process.process_name or str(desc.uuid)
        if not packet.HasField("track_event"):
            return
        if packet.HasField("timestamp_clock_id") and packet.timestamp_clock_id != (
            _CLOCK_INCREMENTAL
        ):
            ts = packet.timestamp
        else:
            self._last_ts += packet.timestamp
            ts = self._last_ts
        self._print_event(packet.track_event, ts)

    def _print_event(self, event: Any, ts: int) -> None:
        track = event.track_uuid if event.HasField("track_uuid") else self._default_track
        stack = self._stacks.setdefault(track, [])
        name = self._names.get(event.name_iid, "?") if event.HasField("name_iid") else event.name
        categories = [self._categories.get(i, "?") for i in event.category_iids]
        categories += list(event.categories)
        args = dict(_annotation(a, self._annotation_names) for a in event.debug_annotations)
        where = self._tracks.get(track, "")
        kind = event.type
        if kind == 2:  # slice end
            begun_name, begun = stack.pop() if stack else ("?", ts)
            text = f"{'  ' * len(stack)}< {begun_name} ({(ts - begun) / 1e6:.3f} ms)"
        else:
            indent = "  " * len(stack)
            label = ",".join(categories)
            if kind == 4:  # counter
                value = (
                    event.double_counter_value
                    if event.HasField("double_counter_value")
                    else event.counter_value
                )
                text = f"{indent}{where} = {value}"
            else:
                marker = "*" if kind == 3 else ">"
                text = f"{indent}{marker} {label}:{name}"
            if args:
                text += " " + " ".join(f"{k}={v!r}" for k, v in args.items())
            if kind == 1:
                stack.append((name, ts))
        line = f"[{(ts - self._start) / 1e9:10.6f}] {where:<16} {text}\n"
        stream = self._stream or (sys.stdout if self._stdout else sys.stderr)
        with _lock:
            stream.write(line)
            stream.flush()

    def close(self) -> None:
        """Nothing to release."""
