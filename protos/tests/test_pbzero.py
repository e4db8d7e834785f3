"""The generated ProtoZero writers produce bytes that upstream's schema and ours parse alike."""

from __future__ import annotations

import importlib
import pkgutil

import perfetto_protos
import pytest
from google.protobuf import text_format
from perfetto_protos import upstream
from perfetto_protos.trace import trace_packet_pb2, trace_packet_pbzero
from perfetto_protos.trace.track_event.track_event_pbzero import TrackEvent
from protozero import HeapBuffered


def test_every_pb2_module_has_a_pbzero_twin() -> None:
    names = {
        info.name for info in pkgutil.walk_packages(perfetto_protos.__path__, "perfetto_protos.")
    }
    pb2 = sorted(n.removesuffix("_pb2") for n in names if n.endswith("_pb2"))
    pbzero = sorted(n.removesuffix("_pbzero") for n in names if n.endswith("_pbzero"))
    assert pbzero == pb2
    for name in names:
        if name.endswith("_pbzero"):
            importlib.import_module(name)


def _write_packet(packet: trace_packet_pbzero.TracePacket) -> None:
    packet.set_timestamp(2**63 + 5)
    packet.set_trusted_packet_sequence_id(2)
    packet.set_sequence_flags(trace_packet_pbzero.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE)
    defaults = packet.begin_trace_packet_defaults()
    defaults.set_timestamp_clock_id(64)
    defaults.begin_track_event_defaults().set_track_uuid(77)
    interned = packet.begin_interned_data()
    category = interned.add_event_categories()
    category.set_iid(1)
    category.set_name("cat")
    name = interned.add_event_names()
    name.set_iid(1)
    name.set_name("a slice name longer than one tiny buffer")
    event = packet.begin_track_event()
    event.set_type(TrackEvent.TYPE_SLICE_BEGIN)
    event.add_category_iids(1)
    event.set_name_iid(1)
    event.add_flow_ids(2**64 - 1)
    event.set_counter_value(-7)
    arg = event.add_debug_annotations()
    arg.set_name("arg")
    arg.set_double_value(0.25)
    entry = arg.add_dict_entries()
    entry.set_name("k")
    entry.set_string_value("v" * 200)
    packet.set_previous_packet_dropped(1)


@pytest.mark.parametrize("slice_size", [5, 16, 4096])
def test_a_packet_written_with_pbzero_parses_upstream_to_the_same_values(
    slice_size: int,
) -> None:
    heap = HeapBuffered(
        trace_packet_pbzero.TracePacket,
        initial_slice_size=slice_size,
        maximum_slice_size=slice_size,
    )
    _write_packet(heap.get())
    data = heap.serialize()

    ours = trace_packet_pb2.TracePacket.FromString(data)
    theirs = upstream.upstream_message_class("perfetto.protos.TracePacket")()
    theirs.ParseFromString(data)

    assert text_format.MessageToString(theirs, print_unknown_fields=True) == (
        text_format.MessageToString(ours, print_unknown_fields=True)
    )
    assert ours.timestamp == 2**63 + 5
    assert ours.track_event.name_iid == 1
    assert list(ours.track_event.flow_ids) == [2**64 - 1]
    assert ours.track_event.counter_value == -7
    assert ours.track_event.debug_annotations[0].dict_entries[0].string_value == "v" * 200
    assert ours.interned_data.event_names[0].name == "a slice name longer than one tiny buffer"
    assert ours.trace_packet_defaults.track_event_defaults.track_uuid == 77
