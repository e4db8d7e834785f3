"""What the producer port sends producers, serialized without protobuf message objects.

Each function returns the bytes `perfetto_wire.serialize` gives the same protobuf message
(GetAsyncCommandResponse with one command set, InitializeConnectionResponse): the fields
protobuf's order, each set field present (proto2: a field set to 0 or false is sent), each
nested message's size one byte. A command whose config is too large for one-byte sizes is
built as a message and serialized by `serialize`, whose sizes are upstream's.
"""

from __future__ import annotations

from collections.abc import Sequence

from perfetto_protos.config.data_source_config_pb2 import DataSourceConfig
from perfetto_protos.ipc import producer_port_pb2 as pb
from perfetto_protos.tags import fields
from perfetto_wire import serialize
from protozero import MAX_ONE_BYTE_MESSAGE_LENGTH, encode_varint

__all__ = [
    "clear_incremental_state_command",
    "flush_command",
    "initialize_connection_response",
    "setup_data_source_command",
    "setup_tracing_command",
    "start_data_source_command",
    "stop_data_source_command",
]

_SETUP_TRACING = fields.GetAsyncCommandResponse_setup_tracing_TAG
_SETUP_DATA_SOURCE = fields.GetAsyncCommandResponse_setup_data_source_TAG
_START_DATA_SOURCE = fields.GetAsyncCommandResponse_start_data_source_TAG
_STOP_DATA_SOURCE = fields.GetAsyncCommandResponse_stop_data_source_TAG
_FLUSH = fields.GetAsyncCommandResponse_flush_TAG
_CLEAR_INCREMENTAL_STATE = fields.GetAsyncCommandResponse_clear_incremental_state_TAG
_PAGE_SIZE_KB = fields.GetAsyncCommandResponse_SetupTracing_shared_buffer_page_size_kb_TAG
_SETUP_INSTANCE_ID = fields.GetAsyncCommandResponse_SetupDataSource_new_instance_id_TAG
_SETUP_CONFIG = fields.GetAsyncCommandResponse_SetupDataSource_config_TAG
_START_INSTANCE_ID = fields.GetAsyncCommandResponse_StartDataSource_new_instance_id_TAG
_START_CONFIG = fields.GetAsyncCommandResponse_StartDataSource_config_TAG
_STOP_INSTANCE_ID = fields.GetAsyncCommandResponse_StopDataSource_instance_id_TAG
_FLUSH_IDS = fields.GetAsyncCommandResponse_Flush_data_source_ids_TAG
_FLUSH_REQUEST_ID = fields.GetAsyncCommandResponse_Flush_request_id_TAG
_FLUSH_FLAGS = fields.GetAsyncCommandResponse_Flush_flags_TAG
_CLEAR_IDS = fields.GetAsyncCommandResponse_ClearIncrementalState_data_source_ids_TAG
_USING_PROVIDED = fields.InitializeConnectionResponse_using_shmem_provided_by_producer_TAG
_DIRECT_PATCHING = fields.InitializeConnectionResponse_direct_smb_patching_supported_TAG
_EMULATION = fields.InitializeConnectionResponse_use_shmem_emulation_TAG
# Every tag above is one byte, and so is every nested size written below (at most 127).


def _command(tag: int, member: bytes) -> bytes | None:
    """The command `member` as the one field `tag` of a GetAsyncCommandResponse; None when
    its size does not fit one byte."""
    size = len(member)
    if size > MAX_ONE_BYTE_MESSAGE_LENGTH:
        return None
    return bytes((tag, size)) + member


def _repeated(tag: int, values: Sequence[int]) -> bytes:
    tag_byte = bytes((tag,))
    return b"".join(tag_byte + encode_varint(value) for value in values)


def setup_tracing_command(page_size_kb: int | None) -> bytes:
    """SetupTracing, with `shared_buffer_page_size_kb` unless None (the producer's own SMB)."""
    if page_size_kb is None:
        return bytes((_SETUP_TRACING, 0))
    member = bytes((_PAGE_SIZE_KB,)) + encode_varint(page_size_kb)
    return bytes((_SETUP_TRACING, len(member))) + member


def _data_source_command(
    tag: int, id_tag: int, config_tag: int, instance_id: int, config: DataSourceConfig
) -> bytes | None:
    config_bytes = config.SerializeToString()
    if len(config_bytes) > MAX_ONE_BYTE_MESSAGE_LENGTH:
        return None
    member = (
        bytes((id_tag,))
        + encode_varint(instance_id)
        + bytes((config_tag, len(config_bytes)))
        + config_bytes
    )
    return _command(tag, member)


def setup_data_source_command(instance_id: int, config: DataSourceConfig) -> bytes:
    """SetupDataSource of instance `instance_id` with `config`."""
    encoded = _data_source_command(
        _SETUP_DATA_SOURCE, _SETUP_INSTANCE_ID, _SETUP_CONFIG, instance_id, config
    )
    if encoded is not None:
        return encoded
    command = pb.GetAsyncCommandResponse()
    command.setup_data_source.new_instance_id = instance_id
    command.setup_data_source.config.CopyFrom(config)
    return serialize(command)


def start_data_source_command(instance_id: int, config: DataSourceConfig) -> bytes:
    """StartDataSource of instance `instance_id` with `config`."""
    encoded = _data_source_command(
        _START_DATA_SOURCE, _START_INSTANCE_ID, _START_CONFIG, instance_id, config
    )
    if encoded is not None:
        return encoded
    command = pb.GetAsyncCommandResponse()
    command.start_data_source.new_instance_id = instance_id
    command.start_data_source.config.CopyFrom(config)
    return serialize(command)


def stop_data_source_command(instance_id: int) -> bytes:
    """StopDataSource of instance `instance_id`."""
    member = bytes((_STOP_INSTANCE_ID,)) + encode_varint(instance_id)
    return bytes((_STOP_DATA_SOURCE, len(member))) + member


def flush_command(request_id: int, instance_ids: Sequence[int], flags: int) -> bytes:
    """Flush request `request_id` of the instances `instance_ids`."""
    member = b"".join(
        (
            _repeated(_FLUSH_IDS, instance_ids),
            bytes((_FLUSH_REQUEST_ID,)),
            encode_varint(request_id),
            bytes((_FLUSH_FLAGS,)),
            encode_varint(flags),
        )
    )
    encoded = _command(_FLUSH, member)
    if encoded is not None:
        return encoded
    command = pb.GetAsyncCommandResponse()
    command.flush.request_id = request_id
    command.flush.data_source_ids.extend(instance_ids)
    command.flush.flags = flags
    return serialize(command)


def clear_incremental_state_command(instance_ids: Sequence[int]) -> bytes:
    """ClearIncrementalState of the instances `instance_ids`."""
    encoded = _command(_CLEAR_INCREMENTAL_STATE, _repeated(_CLEAR_IDS, instance_ids))
    if encoded is not None:
        return encoded
    command = pb.GetAsyncCommandResponse()
    command.clear_incremental_state.data_source_ids.extend(instance_ids)
    command.clear_incremental_state.SetInParent()
    return serialize(command)


def initialize_connection_response(
    *, using_shmem_provided_by_producer: bool, use_shmem_emulation: bool
) -> bytes:
    """The InitializeConnection reply; direct SMB patching is always supported."""
    return bytes(
        (
            _USING_PROVIDED,
            using_shmem_provided_by_producer,
            _DIRECT_PATCHING,
            1,
            _EMULATION,
            use_shmem_emulation,
        )
    )
