"""The generated modules import and expose what the IPC layer relies on, and the generated tags
hold what the schema says."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from google.protobuf.descriptor import Descriptor
from google.protobuf.descriptor_pb2 import FileDescriptorProto
from perfetto_protos.ipc import consumer_port_pb2, producer_port_pb2, relay_port_pb2
from perfetto_protos.ipc.wire_protocol_pb2 import IPCFrame
from perfetto_protos.tags import fields
from perfetto_protos.trace.trace_packet_pb2 import TracePacket

PROTO_DIR = Path(__file__).resolve().parents[1] / "perfetto"


def test_every_proto_has_an_importable_module(pb2_modules: list[ModuleType]) -> None:
    sources = sorted(
        p.relative_to(PROTO_DIR).with_suffix("").as_posix() for p in PROTO_DIR.rglob("*.proto")
    )
    modules = sorted(
        m.__name__.removeprefix("perfetto_protos.").replace(".", "/").removesuffix("_pb2")
        for m in pb2_modules
    )
    assert modules == sources
    for module in pb2_modules:
        assert module.DESCRIPTOR.package == "perfetto.protos"
        proto = FileDescriptorProto.FromString(module.DESCRIPTOR.serialized_pb)
        assert proto.syntax in ("", "proto2")


def test_bind_service_frame_matches_abi_example() -> None:
    frame = IPCFrame(request_id=1)
    frame.msg_bind_service.service_name = "ProducerPort"
    payload = frame.SerializeToString()
    wire = len(payload).to_bytes(4, "little") + payload
    assert wire.hex(" ") == "12 00 00 00 10 01 1a 0e 0a 0c 50 72 6f 64 75 63 65 72 50 6f 72 74"


def _methods(module: ModuleType, service: str) -> list[tuple[str, str, str, bool]]:
    desc = module.DESCRIPTOR.services_by_name[service]
    return [
        (m.name, m.input_type.name, m.output_type.name, m.server_streaming) for m in desc.methods
    ]


def _assert_request_response_naming(methods: list[tuple[str, str, str, bool]]) -> None:
    for name, request, response, _ in methods:
        assert (request, response) == (f"{name}Request", f"{name}Response")


def test_producer_port_methods_in_upstream_order() -> None:
    methods = _methods(producer_port_pb2, "ProducerPort")
    assert [name for name, _, _, _ in methods] == [
        "InitializeConnection",
        "RegisterDataSource",
        "UnregisterDataSource",
        "CommitData",
        "GetAsyncCommand",
        "RegisterTraceWriter",
        "UnregisterTraceWriter",
        "NotifyDataSourceStarted",
        "NotifyDataSourceStopped",
        "ActivateTriggers",
        "Sync",
        "UpdateDataSource",
    ]
    _assert_request_response_naming(methods)
    assert [name for name, _, _, stream in methods if stream] == ["GetAsyncCommand"]


def test_consumer_port_methods_in_upstream_order() -> None:
    methods = _methods(consumer_port_pb2, "ConsumerPort")
    assert [name for name, _, _, _ in methods] == [
        "EnableTracing",
        "DisableTracing",
        "ReadBuffers",
        "FreeBuffers",
        "Flush",
        "StartTracing",
        "ChangeTraceConfig",
        "Detach",
        "Attach",
        "GetTraceStats",
        "ObserveEvents",
        "QueryServiceState",
        "QueryCapabilities",
        "SaveTraceForBugreport",
        "CloneSession",
    ]
    _assert_request_response_naming(methods)
    streaming = [name for name, _, _, stream in methods if stream]
    assert streaming == ["ReadBuffers", "ObserveEvents", "QueryServiceState"]


def test_relay_port_methods() -> None:
    assert [name for name, _, _, _ in _methods(relay_port_pb2, "RelayPort")] == [
        "InitRelay",
        "SyncClock",
    ]


def test_upstream_oneofs_are_kept() -> None:
    assert [f.name for f in IPCFrame.DESCRIPTOR.oneofs_by_name["msg"].fields] == [
        "msg_bind_service",
        "msg_bind_service_reply",
        "msg_invoke_method",
        "msg_invoke_method_reply",
        "msg_request_error",
        "set_peer_identity",
    ]
    data = TracePacket.DESCRIPTOR.oneofs_by_name["data"]
    assert {"track_event", "trace_config", "for_testing", "synchronization_marker"} <= {
        f.name for f in data.fields
    }
    packet = TracePacket(trusted_uid=0, trusted_packet_sequence_id=1)
    assert packet.WhichOneof("optional_trusted_uid") == "trusted_uid"
    assert packet.SerializeToString() == bytes.fromhex("18 00 50 01")


def test_the_tags_hold_every_field_number_and_enum_value(pb2_modules: list[ModuleType]) -> None:
    checked = 0

    def visit(message: Descriptor, prefix: str) -> None:
        nonlocal checked
        for field in message.fields:
            assert getattr(fields, f"{prefix}_{field.name}_ID") == field.number
            checked += 1
        for enum in message.enum_types:
            for value in enum.values:
                assert getattr(fields, f"{prefix}_{enum.name}_{value.name}") == value.number
                checked += 1
        for nested in message.nested_types:
            visit(nested, f"{prefix}_{nested.name}")

    for module in pb2_modules:
        for enum in module.DESCRIPTOR.enum_types_by_name.values():
            for value in enum.values:
                assert getattr(fields, value.name) == value.number
                checked += 1
        for message in module.DESCRIPTOR.message_types_by_name.values():
            visit(message, message.name)
    assert fields.FTRACE_STATUS_INVALID_EVENT == 17
    assert fields.TrackEvent_Type_TYPE_SLICE_END == 2
    assert checked > 1000
