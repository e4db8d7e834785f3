"""Bytes written with our classes mean the same to upstream's published schema, and back."""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Iterator
from importlib.machinery import ModuleSpec
from pathlib import Path

import pytest
from google.protobuf import message, text_format
from hypothesis import given, settings
from hypothesis import strategies as st
from perfetto_protos import ProtosError, upstream
from perfetto_protos.common.builtin_clock_pb2 import BUILTIN_CLOCK_BOOTTIME
from perfetto_protos.config.data_source_config_pb2 import DataSourceConfig
from perfetto_protos.config.trace_config_pb2 import TraceConfig
from perfetto_protos.trace.clock_snapshot_pb2 import ClockSnapshot
from perfetto_protos.trace.profiling.profile_packet_pb2 import ProfilePacket
from perfetto_protos.trace.trace_packet_pb2 import TracePacket
from perfetto_protos.trace.trace_pb2 import Trace
from perfetto_protos.trace.track_event.debug_annotation_pb2 import DebugAnnotation
from perfetto_protos.trace.track_event.track_event_pb2 import TrackEvent

SYNC_MARKER = bytes.fromhex("82477a76b28d42ba81dc33326d57a079")


def _service_packets(trace: Trace) -> None:
    config = trace.packet.add(trusted_uid=0, trusted_packet_sequence_id=1).trace_config
    config.buffers.add(size_kb=1024, fill_policy=TraceConfig.BufferConfig.RING_BUFFER)
    source = config.data_sources.add().config
    source.name = "track_event"
    source.track_event_config.enabled_categories.append("*")
    source.for_testing.message_count = 3
    source.heapprofd_config.sampling_interval_bytes = 4096
    config.duration_ms = 2000
    config.trigger_config.trigger_mode = TraceConfig.TriggerConfig.STOP_TRACING
    config.trigger_config.triggers.add(name="t", stop_delay_ms=10)
    config.builtin_data_sources.snapshot_interval_ms = 500

    clock = trace.packet.add(trusted_packet_sequence_id=1).clock_snapshot
    clock.clocks.add(clock_id=ClockSnapshot.Clock.BOOTTIME, timestamp=123)
    clock.clocks.add(clock_id=64, timestamp=5, is_incremental=True, unit_multiplier_ns=1000)
    clock.primary_trace_clock = BUILTIN_CLOCK_BOOTTIME

    trace.packet.add(trusted_packet_sequence_id=1, synchronization_marker=SYNC_MARKER)
    trace.packet.add(timestamp=7).service_event.tracing_started = True
    trace.packet.add().trace_uuid.msb = -5
    info = trace.packet.add().system_info
    info.utsname.sysname = "Linux"
    info.page_size = 4096
    info.num_cpus = 2
    stats = trace.packet.add().trace_stats
    stats.buffer_stats.add(buffer_size=1 << 20, bytes_written=99, chunks_discarded=1)
    stats.writer_stats.add(sequence_id=2, chunk_payload_histogram_counts=[1, 2, 3])
    stats.final_flush_outcome = stats.FINAL_FLUSH_SUCCEEDED
    trace.packet.add().trigger.trigger_name = "t"


def _track_event_packets(trace: Trace) -> None:
    first = trace.packet.add(timestamp=1000, trusted_packet_sequence_id=2)
    first.sequence_flags = TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
    first.first_packet_on_sequence = True
    first.trace_packet_defaults.timestamp_clock_id = 64
    first.trace_packet_defaults.track_event_defaults.track_uuid = 77
    thread = first.track_descriptor
    thread.uuid = 77
    thread.parent_uuid = 76
    thread.thread.pid = 10
    thread.thread.tid = 11
    thread.thread.thread_name = "main"

    second = trace.packet.add(timestamp=1010, trusted_packet_sequence_id=2)
    second.sequence_flags = TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
    second.previous_packet_dropped = 1
    second.interned_data.event_categories.add(iid=1, name="cat")
    second.interned_data.event_names.add(iid=1, name="slice")
    second.interned_data.debug_annotation_names.add(iid=1, name="arg")
    event = second.track_event
    event.type = TrackEvent.TYPE_SLICE_BEGIN
    event.category_iids.append(1)
    event.name_iid = 1
    event.flow_ids.append(2**64 - 1)
    arg = event.debug_annotations.add(name_iid=1, int_value=-3)
    arg.dict_entries.add(name="k", string_value="v")
    event.debug_annotations.add(name="d", double_value=0.5)
    event.debug_annotations.add(
        name="n"
    ).nested_value.nested_type = DebugAnnotation.NestedValue.ARRAY
    event.log_message.body_iid = 4

    counter = trace.packet.add(timestamp=1020, trusted_packet_sequence_id=2).track_event
    counter.type = TrackEvent.TYPE_COUNTER
    counter.track_uuid = 90
    counter.double_counter_value = 2.25
    trace.packet.add().for_testing.payload.str.append("x")


def _profile_packets(trace: Trace) -> None:
    profile = trace.packet.add().profile_packet
    dump = profile.process_dumps.add(pid=42, heap_name="libc.malloc", timestamp=5)
    dump.samples.add(callstack_id=1, self_allocated=4096, alloc_count=1)
    dump.client_error = ProfilePacket.ProcessHeapSamples.CLIENT_ERROR_HIT_TIMEOUT
    dump.stats.unwinding_time_us.buckets.add(upper_limit=10, count=3)
    profile.continued = True
    interned = trace.packet.add().interned_data
    interned.build_ids.add(iid=0, str=b"")
    interned.mappings.add(iid=1, start=0x1000, end=0x2000, path_string_ids=[1])
    interned.frames.add(iid=1, function_name_id=1, mapping_id=1, rel_pc=16)
    interned.callstacks.add(iid=1, frame_ids=[1])
    alloc = trace.packet.add().streaming_allocation
    alloc.address.append(0xDEAD)
    alloc.size.append(16)
    trace.packet.add().streaming_free.address.append(0xDEAD)


def _text(msg: message.Message) -> str:
    """Text format, with fields unknown to the message's schema printed by number."""
    return text_format.MessageToString(msg, print_unknown_fields=True)


def test_a_trace_written_with_our_classes_parses_upstream_to_the_same_values() -> None:
    trace = Trace()
    _service_packets(trace)
    _track_event_packets(trace)
    _profile_packets(trace)
    data = trace.SerializeToString()

    theirs = upstream.parse_upstream_trace(data)

    assert _text(theirs) == _text(trace)
    assert theirs.SerializeToString() == data


def test_fields_we_do_not_model_pass_through_our_classes_unchanged() -> None:
    their_config = upstream.upstream_message_class("perfetto.protos.DataSourceConfig")()
    text_format.Parse(
        'name: "linux.ftrace" ftrace_config { ftrace_events: "sched/sched_switch" }'
        ' chrome_config { trace_config: "{}" }',
        their_config,
    )
    data = their_config.SerializeToString()
    ours = DataSourceConfig.FromString(data)
    assert ours.name == "linux.ftrace"
    assert ours.SerializeToString() == data

    their_packet = upstream.upstream_message_class("perfetto.protos.TracePacket")()
    text_format.Parse(
        "timestamp: 5 battery { charge_counter_uah: 1000 }",
        their_packet,
    )
    packet = TracePacket.FromString(their_packet.SerializeToString())
    assert packet.timestamp == 5
    assert packet.WhichOneof("data") is None
    again = upstream.upstream_message_class("perfetto.protos.TracePacket")()
    again.ParseFromString(packet.SerializeToString())
    assert again == their_packet
    assert "battery {" in _text(again)


annotation = st.one_of(
    st.builds(lambda v: DebugAnnotation(name="i", int_value=v), st.integers(-(2**63), 2**63 - 1)),
    st.builds(lambda v: DebugAnnotation(name="u", uint_value=v), st.integers(0, 2**64 - 1)),
    st.builds(lambda v: DebugAnnotation(name="s", string_value=v), st.text(max_size=20)),
    st.builds(lambda v: DebugAnnotation(name="b", bool_value=v), st.booleans()),
    st.builds(lambda v: DebugAnnotation(name="f", double_value=v), st.floats(allow_nan=False)),
)


track_events = st.builds(
    TrackEvent,
    name=st.text(max_size=30),
    type=st.sampled_from(
        [
            TrackEvent.TYPE_SLICE_BEGIN,
            TrackEvent.TYPE_SLICE_END,
            TrackEvent.TYPE_INSTANT,
            TrackEvent.TYPE_COUNTER,
        ]
    ),
    track_uuid=st.integers(0, 2**64 - 1),
    categories=st.lists(st.text(max_size=10), max_size=4),
    debug_annotations=st.lists(annotation, max_size=4),
    flow_ids=st.lists(st.integers(0, 2**64 - 1), max_size=3),
)


@settings(max_examples=150, deadline=None)
@given(timestamp=st.integers(0, 2**64 - 1), event=track_events)
def test_random_track_events_mean_the_same_upstream(timestamp: int, event: TrackEvent) -> None:
    packet = TracePacket(timestamp=timestamp, trusted_packet_sequence_id=3, track_event=event)
    data = Trace(packet=[packet]).SerializeToString()

    theirs = upstream.parse_upstream_trace(data)

    assert len(theirs.packet) == 1  # type: ignore[attr-defined]
    assert _text(theirs.packet[0]) == _text(packet)  # type: ignore[attr-defined]
    assert "track_event {" in _text(packet)


def test_garbage_is_not_a_trace() -> None:
    with pytest.raises(ProtosError, match="not a valid trace"):
        upstream.parse_upstream_trace(b"\x0a\x05\x01")


def test_unknown_message_name_is_reported() -> None:
    with pytest.raises(ProtosError, match=re.escape("no message 'perfetto.protos.NoSuchThing'")):
        upstream.upstream_message_class("perfetto.protos.NoSuchThing")


@pytest.fixture
def fresh_pool() -> Iterator[None]:
    """Forgets the cached upstream pool before and after the test."""
    upstream.upstream_pool.cache_clear()
    yield
    upstream.upstream_pool.cache_clear()


@pytest.mark.usefixtures("fresh_pool")
def test_missing_perfetto_package_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ProtosError, match="install the `perfetto` package"):
        upstream.upstream_pool()


@pytest.mark.usefixtures("fresh_pool")
@pytest.mark.parametrize(
    ("source", "error"),
    [
        ("DESCRIPTOR = None\n", "no serialized file descriptor"),
        ("def broken(:\n", "cannot parse"),
        ("x.AddSerializedFile(b'\\xff\\xff')\n", "does not load"),
    ],
)
def test_a_damaged_upstream_module_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, source: str, error: str
) -> None:
    schema = tmp_path / "protos" / "perfetto" / "trace" / "perfetto_trace_pb2.py"
    schema.parent.mkdir(parents=True)
    schema.write_text(source)
    spec = ModuleSpec("perfetto", None, is_package=True)
    spec.submodule_search_locations = [str(tmp_path)]
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: spec)
    with pytest.raises(ProtosError, match=error):
        upstream.upstream_pool()
