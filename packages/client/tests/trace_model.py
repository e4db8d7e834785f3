"""Decodes a trace with upstream's schema into what a user means: tracks, slices, args, counters.

The decoder follows the trace processor's rules and asserts the encoding obeys them: interned
ids resolve within the sequence's current incremental state, delta timestamps accumulate on
the sequence's incremental clock, and events reference described tracks.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from perfetto_protos.upstream import parse_upstream_trace

CLOCK_INCREMENTAL = 64
SEQ_INCREMENTAL_STATE_CLEARED = 1
SEQ_NEEDS_INCREMENTAL_STATE = 2
TYPES = {1: "B", 2: "E", 3: "I", 4: "C"}


@dataclass
class Event:
    """One track event, resolved."""

    seq: int
    pid: int
    track: int
    kind: str
    name: str
    categories: list[str]
    ts: int
    args: dict[str, Any]
    counter: float | None = None
    flows: list[int] = field(default_factory=list)
    terminating_flows: list[int] = field(default_factory=list)
    log: LogMessage | None = None


@dataclass
class LogMessage:
    """A TrackEvent's log_message, its body and source location resolved."""

    body: str
    file: str
    function: str
    line: int
    prio: int


@dataclass
class Slice:
    """A begin/end pair on one track."""

    track: int
    name: str
    depth: int
    begin: int
    end: int | None
    args: dict[str, Any]
    """The args of the slice's begin event, and of its end event."""
    categories: list[str]
    flows: list[int] = field(default_factory=list)
    """Flow ids on the slice's begin or end event (the trace processor links both)."""
    terminating_flows: list[int] = field(default_factory=list)


@dataclass
class _SeqState:
    valid: bool = False
    lost: bool = False
    cats: dict[int, str] = field(default_factory=dict)
    names: dict[int, str] = field(default_factory=dict)
    ann_names: dict[int, str] = field(default_factory=dict)
    locations: dict[int, Any] = field(default_factory=dict)
    log_bodies: dict[int, str] = field(default_factory=dict)
    default_track: int = 0
    default_clock: int = 0
    last_ts: int | None = None
    last_abs: int = 0


def annotation_value(ann: Any, names: dict[int, str]) -> tuple[str, Any]:
    """(name, python value) of a DebugAnnotation."""
    name = names[ann.name_iid] if ann.HasField("name_iid") else ann.name
    kind = ann.WhichOneof("value")
    if kind in ("bool_value", "uint_value", "int_value", "double_value", "string_value"):
        return name, getattr(ann, kind)
    if ann.dict_entries:
        return name, dict(annotation_value(e, names) for e in ann.dict_entries)
    if ann.array_values:
        return name, [annotation_value(e, names)[1] for e in ann.array_values]
    if ann.HasField("nested_value"):
        return name, {} if ann.nested_value.nested_type == 1 else []
    return name, None


class TraceModel:
    """A decoded trace."""

    def __init__(self, data: bytes) -> None:
        trace: Any = parse_upstream_trace(data)
        self.trace = trace
        self.events: list[Event] = []
        self.tracks: dict[int, Any] = {}
        self.service_snapshots: list[dict[int, int]] = []
        self.lost_sequences: set[int] = set()
        self.skipped_events = 0
        """Events on a sequence whose incremental state was lost, not yet cleared again."""
        self.trace_writer_packet_loss = 0
        """The service's count of packet losses its writers reported (last TraceStats)."""
        seqs: dict[int, _SeqState] = defaultdict(_SeqState)
        for packet in trace.packet:
            seq_id = packet.trusted_packet_sequence_id
            state = seqs[seq_id]
            if packet.HasField("clock_snapshot") and packet.clock_snapshot.HasField(
                "primary_trace_clock"
            ):
                self.service_snapshots.append(
                    {c.clock_id: c.timestamp for c in packet.clock_snapshot.clocks}
                )
            if packet.HasField("trace_stats"):
                self.trace_writer_packet_loss = sum(
                    b.trace_writer_packet_loss for b in packet.trace_stats.buffer_stats
                )
            if packet.previous_packet_dropped and not packet.first_packet_on_sequence:
                # As trace_processor: the sequence's incremental state is gone with the lost
                # packets until the next packet that clears it.
                self.lost_sequences.add(seq_id)
                state.valid = False
                state.lost = True
            if packet.sequence_flags & SEQ_INCREMENTAL_STATE_CLEARED:
                seqs[seq_id] = state = _SeqState(valid=True)
            if packet.HasField("trace_packet_defaults"):
                defaults = packet.trace_packet_defaults
                state.default_clock = defaults.timestamp_clock_id
                state.default_track = defaults.track_event_defaults.track_uuid
            if packet.HasField("interned_data"):
                interned = packet.interned_data
                state.cats.update({e.iid: e.name for e in interned.event_categories})
                state.names.update({e.iid: e.name for e in interned.event_names})
                state.ann_names.update({e.iid: e.name for e in interned.debug_annotation_names})
                state.locations.update({e.iid: e for e in interned.source_locations})
                state.log_bodies.update({e.iid: e.body for e in interned.log_message_body})
            if packet.HasField("clock_snapshot") and seq_id == state_seq(packet):
                for clock in packet.clock_snapshot.clocks:
                    if clock.clock_id == CLOCK_INCREMENTAL:
                        state.last_ts = clock.timestamp
            if packet.HasField("track_descriptor"):
                desc = packet.track_descriptor
                self.tracks[desc.uuid] = desc
            if not packet.HasField("track_event"):
                continue
            assert packet.sequence_flags & SEQ_NEEDS_INCREMENTAL_STATE
            if state.lost and not state.valid:
                self.skipped_events += 1  # trace_processor skips it too
                continue
            assert state.valid, "an event before its sequence's incremental state was set"
            if packet.HasField("timestamp_clock_id") and packet.timestamp_clock_id != (
                CLOCK_INCREMENTAL
            ):
                ts = packet.timestamp
            else:
                assert state.default_clock == CLOCK_INCREMENTAL
                assert state.last_ts is not None
                state.last_ts += packet.timestamp
                ts = state.last_ts
            te = packet.track_event
            name = ""
            if te.HasField("name_iid"):
                name = state.names[te.name_iid]
            elif te.HasField("name"):
                name = te.name
            cats = [state.cats[i] for i in te.category_iids] + list(te.categories)
            args = dict(annotation_value(a, state.ann_names) for a in te.debug_annotations)
            kind = TYPES[te.type]
            counter = None
            if te.HasField("counter_value"):
                counter = te.counter_value
            elif te.HasField("double_counter_value"):
                counter = te.double_counter_value
            track = te.track_uuid if te.HasField("track_uuid") else state.default_track
            log = None
            if te.log_message.body_iid:  # else the trace processor drops it too
                message = te.log_message
                location = state.locations[message.source_location_iid]
                log = LogMessage(
                    state.log_bodies[message.body_iid],
                    location.file_name,
                    location.function_name,
                    location.line_number,
                    message.prio,
                )
            self.events.append(
                Event(
                    seq_id,
                    packet.trusted_pid,
                    track,
                    kind,
                    name,
                    cats,
                    ts,
                    args,
                    counter,
                    list(te.flow_ids),
                    list(te.terminating_flow_ids),
                    log,
                )
            )

    def slices(self) -> list[Slice]:
        """Every slice, nested per track with begin/end matched like the trace processor."""
        out: list[Slice] = []
        stacks: dict[int, list[Slice]] = defaultdict(list)
        self.flow_occurrences: list[tuple[Slice, Event]] = []
        """(slice, event) for each event with flow ids, in time order."""
        for event in sorted(self.events, key=lambda e: e.ts):
            stack = stacks[event.track]
            if event.kind == "B":
                item = Slice(
                    event.track,
                    event.name,
                    len(stack),
                    event.ts,
                    None,
                    dict(event.args),
                    event.categories,
                )
                stack.append(item)
                out.append(item)
            elif event.kind == "E" and stack:
                item = stack.pop()
                item.end = event.ts
                item.args.update(event.args)  # as the trace processor, which merges them
            elif event.kind == "I":
                item = Slice(
                    event.track,
                    event.name,
                    len(stack),
                    event.ts,
                    event.ts,
                    event.args,
                    event.categories,
                )
                out.append(item)
            else:
                continue
            item.flows += event.flows
            item.terminating_flows += event.terminating_flows
            if event.flows or event.terminating_flows:
                self.flow_occurrences.append((item, event))
        return out

    def flow_links(self) -> list[tuple[Slice, Slice]]:
        """(from, to) slice pairs the flows link, as the trace processor's v2 flows: each
        occurrence of an id links the slice of its previous occurrence to this one, and a
        terminating id ends the flow."""
        self.slices()
        last: dict[int, Slice] = {}
        links: list[tuple[Slice, Slice]] = []
        for item, event in self.flow_occurrences:
            ids = [(f, False) for f in event.flows] + [(f, True) for f in event.terminating_flows]
            for flow_id, terminating in ids:
                previous = last.pop(flow_id, None)
                if previous is not None:
                    links.append((previous, item))
                if not terminating:
                    last[flow_id] = item
        return links

    def thread_names(self) -> dict[int, str]:
        """tid -> thread name, from thread track descriptors."""
        return {
            d.thread.tid: d.thread.thread_name for d in self.tracks.values() if d.HasField("thread")
        }

    def track_name(self, uuid: int) -> str:
        """A track's name (thread name for thread tracks)."""
        desc = self.tracks[uuid]
        if desc.HasField("thread"):
            return str(desc.thread.thread_name)
        if desc.HasField("process"):
            return str(desc.process.process_name)
        return str(desc.name or desc.static_name)

    def counters(self, track_name: str) -> list[float]:
        """The values of a counter track, in time order."""
        return [
            e.counter
            for e in sorted(self.events, key=lambda e: e.ts)
            if e.kind == "C" and self.track_name(e.track) == track_name and e.counter is not None
        ]


def state_seq(packet: Any) -> int:
    """The sequence a packet belongs to."""
    return int(packet.trusted_packet_sequence_id)
