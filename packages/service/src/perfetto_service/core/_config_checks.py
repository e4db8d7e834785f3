"""The checks a TraceConfig must pass before the service creates a session for it."""

from __future__ import annotations

import re
from collections.abc import Sequence

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from perfetto_protos.config.trace_config_pb2 import TraceConfig

from perfetto_service.core._session import TracingSession

MAX_BUFFERS_PER_CONSUMER = 128
MAX_CONCURRENT_SESSIONS = 15
MAX_CONCURRENT_SESSIONS_PER_UID = 5

_MS_PER_HOUR = 3_600_000
MAX_DURATION_MS = 7 * 24 * _MS_PER_HOUR
"""The longest duration_ms (and trigger_timeout_ms) a session may ask for."""
GUARDRAILS_MAX_DURATION_MS = 24 * _MS_PER_HOUR
"""The same, with enable_extra_guardrails."""
_GUARDRAILS_MAX_BUFFER_KB = 128 * 1024
_BUGREPORT_FILENAME = re.compile(r"[a-zA-Z0-9._-]*")
_BUGREPORT_FILENAME_ERROR = "bugreport_filename contains invalid chars. Use [a-zA-Z0-9-_.]+"
_TRIGGER_STOP = TraceConfig.TriggerConfig.STOP_TRACING
_TRIGGER_CLONE = TraceConfig.TriggerConfig.CLONE_SNAPSHOT


def check_trace_config(
    config: TraceConfig, *, sessions: Sequence[TracingSession], consumer_uid: int
) -> str:
    """Why `config` cannot start a session next to `sessions` (upstream's words), or "".

    The buffers, triggers, durations, names and per-uid limits are checked in upstream's
    order; what needs resources (buffers, the output file) is checked when it is acquired.
    A string field that is not UTF-8 is refused first, naming the field (upstream's message
    for `bugreport_filename`, whose characters upstream checks).
    """
    invalid = invalid_utf8_field(config)
    if invalid == "bugreport_filename":
        return _BUGREPORT_FILENAME_ERROR
    if invalid:
        return f"TraceConfig.{invalid} is not valid UTF-8"
    guardrails = config.enable_extra_guardrails
    max_duration = GUARDRAILS_MAX_DURATION_MS if guardrails else MAX_DURATION_MS
    if config.duration_ms > max_duration:
        return f"Requested too long trace ({config.duration_ms}ms  > {max_duration} ms)"
    trigger_config = config.trigger_config
    mode = trigger_config.trigger_mode
    if mode and not 0 < trigger_config.trigger_timeout_ms <= max_duration:
        return (
            "Traces with START_TRACING triggers must provide a positive "
            f"trigger_timeout_ms < 7 days (received {trigger_config.trigger_timeout_ms}ms)"
        )
    if trigger_config.use_clone_snapshot_if_available and mode != _TRIGGER_STOP:
        return "trigger_mode must be STOP_TRACING when use_clone_snapshot_if_available=true"
    if mode and config.duration_ms:
        return "duration_ms was set, this must not be set for traces with triggers."
    if not _BUGREPORT_FILENAME.fullmatch(config.bugreport_filename):
        return _BUGREPORT_FILENAME_ERROR
    if mode in (_TRIGGER_STOP, _TRIGGER_CLONE) and config.write_into_file:
        return (
            "Specifying trigger mode STOP_TRACING/CLONE_SNAPSHOT and write_into_file "
            "together is unsupported"
        )
    names: set[str] = set()
    for trigger in trigger_config.triggers:
        if trigger.name in names:
            return f"Duplicate trigger name: {trigger.name}"
        names.add(trigger.name)
    if guardrails:
        if config.deferred_start:
            return "deferred_start=true is not supported in unsupervised traces"
        total_kb = 0
        for buffer_config in config.buffers:
            if buffer_config.size_kb % 4:
                return f"buffers.size_kb must be a multiple of 4, got {buffer_config.size_kb}"
            total_kb += buffer_config.size_kb
        limit_kb = max(
            _GUARDRAILS_MAX_BUFFER_KB, config.guardrail_overrides.max_tracing_buffer_size_kb
        )
        if total_kb > limit_kb:
            return f"Requested too large trace buffer ({total_kb}kB  > {limit_kb} kB)"
    num_buffers = len(config.buffers)
    if num_buffers > MAX_BUFFERS_PER_CONSUMER:
        return f"Too many buffers configured ({num_buffers})"
    buffer_names: dict[str, int] = {}
    for index, buffer_config in enumerate(config.buffers):
        if buffer_config.name:
            if buffer_config.name in buffer_names:
                return (
                    f'Duplicate buffer name "{buffer_config.name}" at index {index} '
                    f"(first occurrence at index {buffer_names[buffer_config.name]})"
                )
            buffer_names[buffer_config.name] = index
    for cfg_data_source in config.data_sources:
        ds_config = cfg_data_source.config
        target = ds_config.target_buffer
        if ds_config.target_buffer_name:
            resolved = buffer_names.get(ds_config.target_buffer_name)
            if resolved is None:
                return (
                    f'Data source "{ds_config.name}" specified target_buffer_name '
                    f'"{ds_config.target_buffer_name}" which does not match any buffer'
                )
            if target > 0 and target != resolved:
                return (
                    f'Data source "{ds_config.name}" specified both target_buffer={target} '
                    f'and target_buffer_name="{ds_config.target_buffer_name}" '
                    f"(index {resolved}) but they don't match"
                )
            target = resolved
        if target >= num_buffers:
            return (
                f'Data source "{ds_config.name}" specified an out of bounds target_buffer '
                f"({target} >= {num_buffers})"
            )
    if config.unique_session_name and any(
        s.config.unique_session_name == config.unique_session_name for s in sessions
    ):
        return (
            f"A trace with this unique session name ({config.unique_session_name}) already exists"
        )
    sessions_for_uid = sum(1 for s in sessions if s.consumer_uid == consumer_uid)
    if sessions_for_uid >= MAX_CONCURRENT_SESSIONS_PER_UID:
        return (
            f"Too many concurrent tracing sesions ({sessions_for_uid}) for uid "
            f"{consumer_uid} limit is {MAX_CONCURRENT_SESSIONS_PER_UID}"
        )
    if len(sessions) >= MAX_CONCURRENT_SESSIONS:
        return f"Too many concurrent tracing sesions ({len(sessions)})"
    return ""


def invalid_utf8_field(message: Message) -> str:
    """The path of the first string field in `message` (nested ones included) that is not
    UTF-8, e.g. `data_sources[0].config.name`; "" if there is none.

    Protobuf hands such a proto2 string out as `bytes` instead of `str`.
    """
    for field, value in message.ListFields():
        if field.type == FieldDescriptor.TYPE_STRING:
            values = value if field.is_repeated else (value,)
            for index, item in enumerate(values):
                if isinstance(item, bytes):
                    return field.name + (f"[{index}]" if field.is_repeated else "")
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            children = value if field.is_repeated else (value,)
            for index, child in enumerate(children):
                inner = invalid_utf8_field(child)
                if inner:
                    where = f"{field.name}[{index}]" if field.is_repeated else field.name
                    return f"{where}.{inner}"
    return ""
