"""The TraceConfig checks EnableTracing runs before creating a session."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from perfetto_protos.config.trace_config_pb2 import TraceConfig
from perfetto_service.core._config_checks import check_trace_config
from tracing_service_harness import FakeConsumer, ServiceEnv, simple_config


def _check(config: TraceConfig) -> str:
    return check_trace_config(config, sessions=[], consumer_uid=1000)


def _with(change: Callable[[TraceConfig], None]) -> TraceConfig:
    config = simple_config()
    change(config)
    return config


def _triggers(mode: int, *names: str, timeout_ms: int = 1000) -> Callable[[TraceConfig], None]:
    def change(config: TraceConfig) -> None:
        config.trigger_config.trigger_mode = mode  # type: ignore[assignment]
        config.trigger_config.trigger_timeout_ms = timeout_ms
        for name in names:
            config.trigger_config.triggers.add(name=name)

    return change


_START = TraceConfig.TriggerConfig.START_TRACING
_STOP = TraceConfig.TriggerConfig.STOP_TRACING


def _too_long(config: TraceConfig) -> None:
    config.duration_ms = 8 * 24 * 3600 * 1000


def _bad_filename(config: TraceConfig) -> None:
    config.bugreport_filename = "../etc"


def _stop_trigger_into_file(config: TraceConfig) -> None:
    _triggers(_STOP, "a")(config)
    config.write_into_file = True


def _trigger_and_duration(config: TraceConfig) -> None:
    _triggers(_STOP, "a")(config)
    config.duration_ms = 10


def _guarded_deferred(config: TraceConfig) -> None:
    config.enable_extra_guardrails = True
    config.deferred_start = True


def _guarded_odd_buffer(config: TraceConfig) -> None:
    config.enable_extra_guardrails = True
    config.buffers.add(size_kb=6)


def _too_many_buffers(config: TraceConfig) -> None:
    for _ in range(128):
        config.buffers.add(size_kb=4)


def _duplicate_buffer_names(config: TraceConfig) -> None:
    config.buffers[0].name = "x"
    config.buffers.add(size_kb=4, name="x")


def _unknown_buffer_name(config: TraceConfig) -> None:
    config.data_sources[0].config.target_buffer_name = "nope"


def _conflicting_buffer_refs(config: TraceConfig) -> None:
    config.buffers.add(size_kb=4, name="second")
    config.data_sources[0].config.target_buffer_name = "second"
    config.data_sources[0].config.target_buffer = 5


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (_too_long, "Requested too long trace"),
        (_triggers(_START, "a", timeout_ms=0), "positive trigger_timeout_ms"),
        (_triggers(_START, "a", "a"), "Duplicate trigger name: a"),
        (_bad_filename, "bugreport_filename"),
        (_stop_trigger_into_file, "STOP_TRACING/CLONE_SNAPSHOT and write_into_file"),
        (_trigger_and_duration, "duration_ms was set"),
        (_guarded_deferred, "deferred_start=true is not supported"),
        (_guarded_odd_buffer, "multiple of 4"),
        (_too_many_buffers, "Too many buffers configured (129)"),
        (_duplicate_buffer_names, 'Duplicate buffer name "x" at index 1'),
        (_unknown_buffer_name, "does not match any buffer"),
        (_conflicting_buffer_refs, "don't match"),
    ],
)
def test_rejected_configs(change: Callable[[TraceConfig], None], message: str) -> None:
    assert message in _check(_with(change))


def test_accepted_configs() -> None:
    assert _check(simple_config()) == ""
    assert _check(_with(_triggers(_STOP, "a", "b"))) == ""

    def named(config: TraceConfig) -> None:
        config.buffers[0].name = "main"
        config.data_sources[0].config.target_buffer_name = "main"

    assert _check(_with(named)) == ""


def test_session_limits() -> None:
    env = ServiceEnv(uid=0)
    try:
        consumers = [FakeConsumer(env, uid=1000).connect() for _ in range(6)]
        for consumer in consumers:
            consumer.enable(simple_config(buffer_kb=16))
        assert (
            "Too many concurrent tracing sesions (5) for uid 1000" in consumers[-1].wait_disabled()
        )
        assert not any(c.disabled for c in consumers[:-1])
    finally:
        env.close()
