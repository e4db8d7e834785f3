"""A TraceConfig with a string that is not UTF-8, sent by a consumer to a traced subprocess."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator

import pytest
from google.protobuf.descriptor import Descriptor
from perfetto_protos.config.trace_config_pb2 import TraceConfig
from protozero import encode_varint
from traced_testlib import ConsumerSession, Traced, make_config

NOT_UTF8 = b"trace\xff\xfe.pftrace"


@pytest.fixture(scope="module")
def traced() -> Iterator[Traced]:
    with tempfile.TemporaryDirectory() as directory, Traced(directory) as daemon:
        yield daemon


def _string_field(number: int, value: bytes) -> bytes:
    return encode_varint(number << 3 | 2) + encode_varint(len(value)) + value


def _config_with(path: tuple[str, ...]) -> TraceConfig:
    """The test config plus the string field at `path` holding `NOT_UTF8` (in a new element
    where a field is repeated), parsed from the bytes a consumer would send."""
    numbers = []
    descriptor: Descriptor | None = TraceConfig.DESCRIPTOR
    for name in path:
        assert descriptor is not None
        field = descriptor.fields_by_name[name]
        numbers.append(field.number)
        descriptor = field.message_type
    data = NOT_UTF8
    for number in reversed(numbers):
        data = _string_field(number, data)
    return TraceConfig.FromString(make_config().SerializeToString() + data)


@pytest.mark.parametrize(
    ("path", "error"),
    [
        (
            ("bugreport_filename",),
            "bugreport_filename contains invalid chars. Use [a-zA-Z0-9-_.]+",
        ),
        (("unique_session_name",), "TraceConfig.unique_session_name is not valid UTF-8"),
        (("output_path",), "TraceConfig.output_path is not valid UTF-8"),
        (
            ("data_sources", "config", "name"),
            "TraceConfig.data_sources[1].config.name is not valid UTF-8",
        ),
    ],
)
def test_a_string_that_is_not_utf8_is_one_clear_error_and_no_traceback(
    traced: Traced, path: tuple[str, ...], error: str
) -> None:
    config = _config_with(path)
    log_start = len(traced.log)
    session = ConsumerSession(traced.consumer_socket)
    try:
        session.client.enable_tracing(config)
        assert session.wait_disabled() == error
    finally:
        session.close()
    # traced still serves a valid session afterwards.
    valid = ConsumerSession(traced.consumer_socket)
    try:
        valid.client.enable_tracing(make_config(duration_ms=1))
        assert valid.wait_disabled() == ""
    finally:
        valid.close()
    new_lines = traced.log[log_start:]
    assert not any("Traceback" in line or "Error" in line for line in new_lines), new_lines
