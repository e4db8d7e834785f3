"""The producer port's commands and replies: the bytes protobuf's messages serialize to."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from perfetto_protos.config.data_source_config_pb2 import DataSourceConfig
from perfetto_protos.ipc import producer_port_pb2 as pb
from perfetto_service.ipc.service._producer_commands import (
    clear_incremental_state_command,
    flush_command,
    initialize_connection_response,
    setup_data_source_command,
    setup_tracing_command,
    start_data_source_command,
    stop_data_source_command,
)
from perfetto_wire import serialize

UINT64_MAX = (1 << 64) - 1
IDS = [0, 1, 127, 128, 1 << 32, 1 << 63, UINT64_MAX]
"""Edge values of a uint64 id: empty varint, one byte, two bytes, ..., ten bytes."""


def _expected(message: pb.GetAsyncCommandResponse | pb.InitializeConnectionResponse) -> bytes:
    """What the producer port sent for `message` before: protobuf's bytes, as upstream sizes
    its nested messages (`serialize`), which is protobuf's own encoding below 128 bytes."""
    data = serialize(message)
    if len(data) <= 127:
        assert data == message.SerializeToString()
    return data


def _configs() -> list[DataSourceConfig]:
    small = DataSourceConfig(name="track_event", target_buffer=0, tracing_session_id=1)
    unicode = DataSourceConfig(name="données ✓ 🐍", target_buffer=3, tracing_session_id=1 << 40)
    unicode.track_event_config.enabled_categories.extend(["é", "catégorie"])
    # A config of more than 127 bytes: its nested size takes upstream's 4-byte form.
    large = DataSourceConfig(name="linux.ftrace", target_buffer=1, tracing_session_id=7)
    large.track_event_config.enabled_categories.extend(f"category{i}" for i in range(40))
    huge = DataSourceConfig(name="x" * 5000, tracing_session_id=UINT64_MAX)
    return [DataSourceConfig(), small, unicode, large, huge]


@pytest.mark.parametrize("config", _configs(), ids=["empty", "small", "unicode", "large", "huge"])
@pytest.mark.parametrize("instance_id", IDS)
def test_data_source_commands(instance_id: int, config: DataSourceConfig) -> None:
    setup = pb.GetAsyncCommandResponse()
    setup.setup_data_source.new_instance_id = instance_id
    setup.setup_data_source.config.CopyFrom(config)
    assert setup_data_source_command(instance_id, config) == _expected(setup)
    start = pb.GetAsyncCommandResponse()
    start.start_data_source.new_instance_id = instance_id
    start.start_data_source.config.CopyFrom(config)
    assert start_data_source_command(instance_id, config) == _expected(start)


@pytest.mark.parametrize("instance_id", IDS)
def test_stop_data_source(instance_id: int) -> None:
    command = pb.GetAsyncCommandResponse()
    command.stop_data_source.instance_id = instance_id
    assert stop_data_source_command(instance_id) == _expected(command)


@pytest.mark.parametrize("page_size_kb", [None, 0, 4, 64, 1 << 20, UINT64_MAX >> 32])
def test_setup_tracing(page_size_kb: int | None) -> None:
    command = pb.GetAsyncCommandResponse()
    command.setup_tracing.SetInParent()
    if page_size_kb is not None:
        command.setup_tracing.shared_buffer_page_size_kb = page_size_kb
    assert setup_tracing_command(page_size_kb) == _expected(command)


ID_LISTS = [[], [1], IDS, list(range(1, 200)), [UINT64_MAX] * 20]
"""No instance, one, the edge values, and lists whose member needs upstream's 4-byte size."""


@pytest.mark.parametrize("instance_ids", ID_LISTS, ids=["none", "one", "edges", "many", "long"])
@pytest.mark.parametrize(("request_id", "flags"), [(0, 0), (1, 3), (UINT64_MAX, UINT64_MAX)])
def test_flush(request_id: int, instance_ids: Sequence[int], flags: int) -> None:
    command = pb.GetAsyncCommandResponse()
    command.flush.request_id = request_id
    command.flush.data_source_ids.extend(instance_ids)
    command.flush.flags = flags
    assert flush_command(request_id, instance_ids, flags) == _expected(command)


@pytest.mark.parametrize("instance_ids", ID_LISTS, ids=["none", "one", "edges", "many", "long"])
def test_clear_incremental_state(instance_ids: Sequence[int]) -> None:
    command = pb.GetAsyncCommandResponse()
    command.clear_incremental_state.data_source_ids.extend(instance_ids)
    command.clear_incremental_state.SetInParent()
    assert clear_incremental_state_command(instance_ids) == _expected(command)


@pytest.mark.parametrize("provided", [False, True])
@pytest.mark.parametrize("emulation", [False, True])
def test_initialize_connection_response(provided: bool, emulation: bool) -> None:
    reply = pb.InitializeConnectionResponse(
        using_shmem_provided_by_producer=provided,
        direct_smb_patching_supported=True,
        use_shmem_emulation=emulation,
    )
    assert initialize_connection_response(
        using_shmem_provided_by_producer=provided, use_shmem_emulation=emulation
    ) == _expected(reply)
