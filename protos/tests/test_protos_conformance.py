"""Our schema agrees with upstream's published one wherever the two overlap."""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.descriptor import FileDescriptor
from perfetto_protos.upstream import schema_mismatches, upstream_pool

F = descriptor_pb2.FieldDescriptorProto


def test_zero_mismatches_with_upstream(our_files: list[FileDescriptor]) -> None:
    assert schema_mismatches(our_files) == []


def test_the_comparison_covers_the_trace_and_config_tree(our_files: list[FileDescriptor]) -> None:
    pool = upstream_pool()
    ours = [name for f in our_files for name in f.message_types_by_name]
    shared = []
    for name in ours:
        try:
            pool.FindMessageTypeByName(f"perfetto.protos.{name}")
        except KeyError:
            continue
        shared.append(name)
    for name in ("TracePacket", "TrackEvent", "TraceConfig", "DataSourceConfig", "ProfilePacket"):
        assert name in shared
    assert len(shared) > 45


def _bad_file() -> FileDescriptor:
    """A small schema that contradicts upstream's in every way the check looks at."""
    proto = descriptor_pb2.FileDescriptorProto(
        name="bad/bad.proto", package="perfetto.protos", syntax="proto2"
    )
    packet = proto.message_type.add(name="TracePacket")
    # Upstream: optional uint64 timestamp = 8.
    packet.field.add(name="timestamp", number=9, type=F.TYPE_UINT64, label=F.LABEL_OPTIONAL)
    # Upstream: optional uint32 timestamp_clock_id = 58.
    packet.field.add(
        name="timestamp_clock_id", number=58, type=F.TYPE_INT32, label=F.LABEL_OPTIONAL
    )
    # Upstream: optional uint32 sequence_flags = 13.
    packet.field.add(name="sequence_flags", number=13, type=F.TYPE_UINT32, label=F.LABEL_REPEATED)
    # Upstream: TrackEvent track_event = 11.
    packet.field.add(
        name="track_event",
        number=11,
        type=F.TYPE_MESSAGE,
        label=F.LABEL_OPTIONAL,
        type_name=".perfetto.protos.TracePacket",
    )
    packet.field.add(name="not_upstream", number=5000, type=F.TYPE_BOOL, label=F.LABEL_OPTIONAL)
    flags = packet.enum_type.add(name="SequenceFlags")
    flags.value.add(name="SEQ_UNSPECIFIED", number=0)
    flags.value.add(name="SEQ_INCREMENTAL_STATE_CLEARED", number=2)
    flags.value.add(name="SEQ_MADE_UP", number=3)
    # Nested messages are compared too; upstream packs this one.
    writer_stats = proto.message_type.add(name="TraceStats").nested_type.add(name="WriterStats")
    writer_stats.field.add(
        name="chunk_payload_histogram_counts",
        number=2,
        type=F.TYPE_UINT64,
        label=F.LABEL_REPEATED,
    )
    # A message upstream does not have is not compared at all.
    private = proto.message_type.add(name="OnlyOurs")
    private.field.add(name="x", number=1, type=F.TYPE_BOOL, label=F.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return pool.FindFileByName("bad/bad.proto")


def test_the_check_reports_every_deliberate_mismatch() -> None:
    problems = schema_mismatches([_bad_file()])
    packet = "perfetto.protos.TracePacket"
    int32, uint32 = F.TYPE_INT32, F.TYPE_UINT32
    assert sorted(problems) == sorted(
        [
            f"{packet}.SequenceFlags.SEQ_INCREMENTAL_STATE_CLEARED: value 2, upstream 1",
            "perfetto.protos.TracePacket.SequenceFlags.SEQ_MADE_UP: no such value upstream",
            "perfetto.protos.TracePacket.timestamp: number 9, upstream 8",
            f"{packet}.timestamp_clock_id: type {int32}, upstream {uint32}",
            "perfetto.protos.TracePacket.sequence_flags: label 'repeated', upstream 'optional'",
            "perfetto.protos.TracePacket.track_event: type_name 'perfetto.protos.TracePacket', "
            "upstream 'perfetto.protos.TrackEvent'",
            "perfetto.protos.TracePacket.track_event: oneof None, upstream 'data'",
            "perfetto.protos.TracePacket.not_upstream: no such field upstream",
            "perfetto.protos.TraceStats.WriterStats.chunk_payload_histogram_counts: "
            "packed False, upstream True",
        ]
    )
