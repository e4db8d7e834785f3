"""Writes random TracePackets with the generated writers; run under each build to compare.

python pbzero_probe.py SEED COUNT

Each line holds, in hex, a packet written by the ProtoZero writers over slices of a random size
and the same packet serialized by protobuf, then whether the writers' modules ran compiled.
"""

from __future__ import annotations

import random
import sys
from typing import Any

from perfetto_protos.trace import trace_packet_pb2
from perfetto_protos.trace.trace_packet_pbzero import TracePacket
from perfetto_protos.trace.track_event import (
    debug_annotation_pbzero,
    track_event_pb2,
    track_event_pbzero,
)
from perfetto_protos.trace.track_event.debug_annotation_pb2 import DebugAnnotation as PbAnnotation
from protozero import HeapBuffered

_U64 = (0, 1, 127, 128, 16383, 16384, 2**32 - 1, 2**63, 2**64 - 1)
_I64 = (0, -1, 1, -(2**63), 2**63 - 1, -128, 300)


def _text(rng: random.Random) -> str:
    return "é" * rng.randint(0, 2) + "x" * rng.choice((0, 1, 120, 200))


def _annotation(
    rng: random.Random,
    ours: debug_annotation_pbzero.DebugAnnotation,
    theirs: PbAnnotation,
    depth: int,
) -> None:
    """Random fields, in field-number order, written to both: by the setters or by one
    `set_fields` call."""
    values: dict[str, Any] = {}
    if rng.random() < 0.5:
        values["bool_value"] = rng.choice((True, False))
    if rng.random() < 0.5:
        values["uint_value"] = rng.choice(_U64)
    if rng.random() < 0.5:
        values["int_value"] = rng.choice(_I64)
    if rng.random() < 0.5:
        values["double_value"] = rng.uniform(-1e9, 1e9)
    if rng.random() < 0.5:
        values["string_value"] = _text(rng)
    if rng.random() < 0.7:
        values["name"] = _text(rng)
    for key, value in values.items():
        setattr(theirs, key, value)
    if rng.random() < 0.5:
        ours.set_fields(**values)
    else:
        for key, value in values.items():
            getattr(ours, f"set_{key}")(value)
    for _ in range(rng.randint(0, 2) if depth < 3 else 0):
        _annotation(rng, ours.add_dict_entries(), theirs.dict_entries.add(), depth + 1)


def write_random(rng: random.Random) -> tuple[bytes, bytes]:
    """One random packet (a TrackEvent with debug annotations), by protozero and protobuf."""
    size = rng.choice((5, 16, 100, 4096))
    heap = HeapBuffered(TracePacket, initial_slice_size=size, maximum_slice_size=size)
    packet = heap.get()
    expected = trace_packet_pb2.TracePacket()
    if rng.random() < 0.8:
        timestamp = rng.choice(_U64)
        packet.set_timestamp(timestamp)
        expected.timestamp = timestamp
    event = packet.begin_track_event()
    theirs = expected.track_event
    for _ in range(rng.randint(0, 3)):
        _annotation(rng, event.add_debug_annotations(), theirs.debug_annotations.add(), 0)
    if rng.random() < 0.8:
        kind = rng.choice(list(track_event_pbzero.TrackEvent.Type))
        event.set_type(kind)
        theirs.type = track_event_pb2.TrackEvent.Type.ValueType(kind)
    if rng.random() < 0.8:
        uuid = rng.choice(_U64)
        event.set_track_uuid(uuid)
        theirs.track_uuid = uuid
    if rng.random() < 0.5:
        name = _text(rng)
        event.set_name(name)
        theirs.name = name
    if rng.random() < 0.5:
        value = rng.choice(_I64)
        event.set_counter_value(value)
        theirs.counter_value = value
    for _ in range(rng.randint(0, 3)):
        flow = rng.choice(_U64)
        event.add_flow_ids(flow)
        theirs.flow_ids.append(flow)
    if rng.random() < 0.8:
        sequence_id = rng.randint(1, 2**32 - 1)
        packet.set_trusted_packet_sequence_id(sequence_id)
        expected.trusted_packet_sequence_id = sequence_id
    return heap.serialize(), expected.SerializeToString()


def main() -> int:
    seed, count = int(sys.argv[1]), int(sys.argv[2])
    rng = random.Random(seed)
    modules = (sys.modules[TracePacket.__module__], track_event_pbzero, debug_annotation_pbzero)
    compiled = all(not (m.__file__ or "").endswith(".py") for m in modules)
    for _ in range(count):
        ours, theirs = write_random(rng)
        print(ours.hex(), theirs.hex())
    print("compiled" if compiled else "pure")
    return 0


if __name__ == "__main__":
    sys.exit(main())
