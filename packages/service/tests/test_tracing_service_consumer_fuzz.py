"""Random configs and random call sequences from consumers never raise out of the service."""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from perfetto_protos.config.trace_config_pb2 import TraceConfig
from tracing_service_harness import FakeConsumer, FakeProducer, ServiceEnv, make_packet

pytestmark = pytest.mark.timeout(180)

_NAMES = ("test.ds", "other.ds", "missing.ds")
_MODES = (0, TraceConfig.TriggerConfig.START_TRACING, TraceConfig.TriggerConfig.STOP_TRACING)


@st.composite
def _configs(draw: st.DrawFn) -> TraceConfig:
    config = TraceConfig()
    for _ in range(draw(st.integers(0, 3))):
        config.buffers.add(
            size_kb=draw(st.sampled_from([0, 4, 16, 64, 6])),
            fill_policy=draw(st.sampled_from([0, 1, 2])),
            name=draw(st.sampled_from(["", "a", "b"])),
        )
    for _ in range(draw(st.integers(0, 3))):
        source = config.data_sources.add()
        source.config.name = draw(st.sampled_from(_NAMES))
        source.config.target_buffer = draw(st.integers(0, 3))
        source.config.target_buffer_name = draw(st.sampled_from(["", "a", "b", "c"]))
        source.producer_name_filter.extend(draw(st.lists(st.sampled_from(["p", "q"]), max_size=2)))
        source.producer_name_regex_filter.extend(
            draw(st.lists(st.sampled_from(["p.*", "[", "q"]), max_size=2))
        )
    config.duration_ms = draw(st.sampled_from([0, 0, 50, 10**9]))
    config.deferred_start = draw(st.booleans())
    config.enable_extra_guardrails = draw(st.booleans())
    config.flush_period_ms = draw(st.sampled_from([0, 30]))
    config.data_source_stop_timeout_ms = draw(st.sampled_from([0, 20]))
    config.unique_session_name = draw(st.sampled_from(["", "u"]))
    config.write_into_file = draw(st.booleans())
    config.builtin_data_sources.disable_service_events = draw(st.booleans())
    config.builtin_data_sources.snapshot_interval_ms = draw(st.sampled_from([0, 10]))
    mode = draw(st.sampled_from(_MODES))
    if mode:
        config.trigger_config.trigger_mode = mode  # type: ignore[assignment]
        config.trigger_config.trigger_timeout_ms = draw(st.sampled_from([0, 40, 2**32 - 1]))
        for name in draw(st.lists(st.sampled_from(["go", "stop"]), max_size=2)):
            config.trigger_config.triggers.add(name=name, stop_delay_ms=draw(st.integers(0, 30)))
    return config


_Action = Callable[[FakeConsumer, FakeProducer], None]


def _call(method: str, *args: object) -> _Action:
    def action(consumer: FakeConsumer, _producer: FakeProducer) -> None:
        getattr(consumer.endpoint, method)(*args)

    return action


def _write(_consumer: FakeConsumer, producer: FakeProducer) -> None:
    for inst in producer.instances.values():
        if inst.writer is not None and not inst.stopped:
            inst.writer.write_packet(make_packet("fuzz"))
            inst.writer.flush()


def _trigger(name: str) -> _Action:
    def action(_consumer: FakeConsumer, producer: FakeProducer) -> None:
        producer.endpoint.activate_triggers([name])

    return action


_ACTIONS = st.sampled_from(
    [
        _call("start_tracing"),
        _call("disable_tracing"),
        _call("flush", 20, lambda _ok: None),
        _call("read_buffers"),
        _call("free_buffers"),
        _call("detach", "k"),
        _call("attach", "k"),
        _call("get_trace_stats"),
        _call("observe_events", 3),
        _call("query_service_state", False, lambda _ok, _s: None),
        _write,
        _trigger("go"),
        _trigger("stop"),
    ]
)


@contextlib.contextmanager
def _service() -> Iterator[ServiceEnv]:
    """A service of its own for one example, with producers p and q registered."""
    env = ServiceEnv(uid=os.getuid())
    try:
        for name in ("p", "q"):
            producer = FakeProducer(env, name=name).connect()
            producer.register("test.ds", will_notify_on_stop=True)
            producer.register("other.ds", handles_incremental_state_clear=True)
        yield env
    finally:
        env.close()


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=_configs(), actions=st.lists(_ACTIONS, max_size=8))
def test_random_configs_and_calls(config: TraceConfig, actions: list[_Action]) -> None:
    with _service() as env:
        consumer = FakeConsumer(env).connect()
        producer = FakeProducer(env, name="p").connect()
        producer.register("test.ds")
        consumer.enable(config)
        for action in actions:
            env.call(functools.partial(action, consumer, producer))
        env.settle()
        assert all(isinstance(error, str) for error in consumer.disabled)
        producer.disconnect()
        attached = env.call(lambda: consumer.endpoint.tracing_session_id)
        env.call(consumer.endpoint.disconnect)
        env.settle()
        # Whatever happened, the session this consumer had attached is gone with it.
        assert env.call(lambda: env.service.session(attached)) is None
        # A detached session is taken back and ended, so that sessions do not pile up.
        cleaner = FakeConsumer(env).connect()
        env.call(lambda: cleaner.endpoint.attach("k"))
        env.call(cleaner.endpoint.disconnect)
        assert _session_count(env) == 0
        # The service still answers.
        states: list[object] = []
        fresh = FakeConsumer(env).connect()
        env.call(lambda: fresh.endpoint.query_service_state(True, lambda _ok, s: states.append(s)))
        assert states


def _session_count(env: ServiceEnv) -> int:
    return env.call(lambda: len(env.service.service_state(0, sessions_only=True).tracing_sessions))
