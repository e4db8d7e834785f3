"""The hot ProtoZero writers (compiled where built): the same bytes in both builds, and what
protobuf writes and reads."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from perfetto_protos.trace import trace_packet_pb2, trace_packet_pbzero
from perfetto_protos.trace.track_event import (
    debug_annotation_pbzero,
    track_event_pb2,
    track_event_pbzero,
)
from protozero import HeapBuffered, Message, _native

PROBE = Path(__file__).with_name("pbzero_probe.py")
HOT = (trace_packet_pbzero, track_event_pbzero, debug_annotation_pbzero)


def _probe(env: dict[str, str]) -> list[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PERFETTO_PY_")}
    result = subprocess.run(
        [sys.executable, str(PROBE), "20261127", "300"],
        env={**clean, **env},
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return result.stdout.splitlines()


def test_the_hot_writers_are_the_compiled_modules_of_perfetto_protos() -> None:
    assert set(_native.compiled_modules("perfetto_protos")) == {m.__name__ for m in HOT}


def test_nested_classes_keep_their_nested_names() -> None:
    event = track_event_pbzero.TrackEvent
    assert event.LegacyEvent is track_event_pbzero.TrackEvent_LegacyEvent
    assert int(event.LegacyEvent.FlowDirection.FLOW_OUT) == 2
    assert event.TYPE_SLICE_BEGIN == int(event.Type.TYPE_SLICE_BEGIN) == 1
    assert issubclass(event.LegacyEvent, Message)
    heap = HeapBuffered(event)
    assert isinstance(heap.get().begin_legacy_event(), event.LegacyEvent)


def test_both_builds_write_the_same_bytes_and_protobuf_reads_them() -> None:
    pure = _probe({_native.PURE_ENV: "1"})
    default = _probe({})
    assert pure[-1] == "pure"
    if os.environ.get(_native.EXPECT_COMPILED_ENV) == "1":
        assert default[-1] == "compiled"
    assert default[:-1] == pure[:-1]
    for line in pure[:-1]:
        ours, theirs = (bytes.fromhex(h) for h in line.split())
        parsed = trace_packet_pb2.TracePacket.FromString(ours)
        assert parsed == trace_packet_pb2.TracePacket.FromString(theirs)


_U64 = st.integers(0, 2**64 - 1)


@settings(max_examples=200, deadline=None)
@given(
    categories=st.lists(_U64, max_size=3),
    kind=st.sampled_from(list(track_event_pbzero.TrackEvent.Type)),
    name_iid=st.none() | _U64,
    track_uuid=st.none() | _U64,
    counter=st.none() | st.integers(-(2**63), 2**63 - 1),
    flows=st.lists(_U64, max_size=3),
    slice_size=st.sampled_from([5, 16, 4096]),
    one_call=st.booleans(),
)
def test_a_track_event_of_scalars_is_byte_for_byte_protobufs(
    *,
    categories: list[int],
    kind: int,
    name_iid: int | None,
    track_uuid: int | None,
    counter: int | None,
    flows: list[int],
    slice_size: int,
    one_call: bool,
) -> None:
    heap = HeapBuffered(
        track_event_pbzero.TrackEvent,
        initial_slice_size=slice_size,
        maximum_slice_size=slice_size,
    )
    event = heap.get()
    expected = track_event_pb2.TrackEvent()
    for iid in categories:  # in field-number order, as protobuf writes them
        event.add_category_iids(iid)
        expected.category_iids.append(iid)
    expected.type = track_event_pb2.TrackEvent.Type.ValueType(kind)
    if name_iid is not None:
        expected.name_iid = name_iid
    if track_uuid is not None:
        expected.track_uuid = track_uuid
    if counter is not None:
        expected.counter_value = counter
    if one_call:
        event.set_fields(type=kind, name_iid=name_iid, track_uuid=track_uuid, counter_value=counter)
    else:
        event.set_type(kind)
        if name_iid is not None:
            event.set_name_iid(name_iid)
        if track_uuid is not None:
            event.set_track_uuid(track_uuid)
        if counter is not None:
            event.set_counter_value(counter)
    for flow in flows:
        event.add_flow_ids(flow)
        expected.flow_ids.append(flow)
    assert heap.serialize() == expected.SerializeToString()
