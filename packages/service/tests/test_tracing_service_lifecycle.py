"""Session lifecycle: duration, flushes and their timeouts, stop acks, deferred start, triggers."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import pytest
from perfetto_protos.common.trace_stats_pb2 import TraceStats
from perfetto_protos.common.tracing_service_capabilities_pb2 import TracingServiceCapabilities
from perfetto_protos.common.tracing_service_state_pb2 import TracingServiceState
from perfetto_protos.config.trace_config_pb2 import TraceConfig
from perfetto_testing import wait_for
from tracing_service_harness import (
    FakeConsumer,
    FakeProducer,
    ServiceEnv,
    make_packet,
    service_packet_kinds,
    simple_config,
    strings_of,
)

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def env() -> Iterator[ServiceEnv]:
    service_env = ServiceEnv(uid=os.getuid())
    yield service_env
    service_env.close()


def _session(
    env: ServiceEnv, config: TraceConfig, **producer_kwargs: Any
) -> tuple[FakeProducer, FakeConsumer]:
    producer = FakeProducer(env, **producer_kwargs).connect()
    producer.register("test.ds", will_notify_on_stop=True)
    consumer = FakeConsumer(env).connect()
    consumer.enable(config)
    env.settle()
    return producer, consumer


def _stats(trace: Any) -> TraceStats:
    packets = [p for p in trace.packet if p.HasField("trace_stats")]
    assert packets
    stats = TraceStats()
    stats.ParseFromString(packets[-1].trace_stats.SerializeToString())
    return stats


def test_duration_ends_the_session_after_a_final_flush(env: ServiceEnv) -> None:
    # 2 s: time for the write below to land before the final flush on a loaded machine.
    producer, consumer = _session(env, simple_config(duration_ms=2000))
    producer.write(producer.instance(), make_packet("before the end"))
    assert consumer.wait_disabled() == ""  # nobody stopped it: the duration did
    assert any(c.startswith("flush:") for c in producer.commands)
    trace = consumer.read_trace()
    # Not flushed by the writer itself: it arrives through the final flush.
    assert strings_of(trace) == ["before the end"]
    stats = _stats(trace)
    assert stats.final_flush_outcome == TraceStats.FINAL_FLUSH_SUCCEEDED
    assert stats.flushes_requested == stats.flushes_succeeded == 1
    assert "service_event:all_data_sources_flushed" in service_packet_kinds(trace)


def test_flush_times_out_when_the_producer_never_acks(env: ServiceEnv) -> None:
    producer, consumer = _session(env, simple_config(), ack_flushes=False)
    assert consumer.flush(timeout_ms=250) is False
    producer.ack_flushes = True
    assert consumer.flush(timeout_ms=5000) is True
    env.call(consumer.endpoint.get_trace_stats)
    wait_for(lambda: bool(consumer.stats))
    success, stats = consumer.stats[0]
    assert success
    assert (stats.flushes_requested, stats.flushes_succeeded, stats.flushes_failed) == (2, 1, 1)


def test_final_flush_timeout_lists_the_slow_data_sources(env: ServiceEnv) -> None:
    config = simple_config(duration_ms=100, flush_timeout_ms=200)
    producer, consumer = _session(env, config, ack_flushes=False)
    assert consumer.wait_disabled() == ""
    trace = consumer.read_trace()
    assert _stats(trace).final_flush_outcome == TraceStats.FINAL_FLUSH_FAILED
    slow = [
        p.service_event.last_flush_slow_data_sources
        for p in trace.packet
        if p.HasField("service_event") and p.service_event.HasField("last_flush_slow_data_sources")
    ]
    assert len(slow) == 1
    assert [(d.producer_name, d.data_source_name) for d in slow[0].data_source] == [
        ("test.producer", "test.ds")
    ]
    assert producer.instance().stopped


def test_stop_waits_for_acks_up_to_the_stop_timeout(env: ServiceEnv) -> None:
    # 3 s: the checks below run before it ends the session, even on a loaded machine.
    config = simple_config(data_source_stop_timeout_ms=3000)
    producer, consumer = _session(env, config, ack_stops=False)
    assert producer.instance().config.stop_timeout_ms == 3000
    env.call(consumer.endpoint.disable_tracing)
    env.settle()
    assert producer.instance().stopped
    assert not consumer.disabled
    consumer.wait_disabled()  # the stop timeout ended it


def test_stop_ack_ends_the_session_at_once(env: ServiceEnv) -> None:
    producer, consumer = _session(env, simple_config(data_source_stop_timeout_ms=30_000))
    started = time.monotonic()
    assert consumer.stop() == ""
    assert time.monotonic() - started < 20  # well before the 30 s stop timeout
    assert producer.instance().stopped


def test_will_notify_on_start_delays_all_data_sources_started(env: ServiceEnv) -> None:
    producer = FakeProducer(env).connect()
    producer.register("test.ds", will_notify_on_start=True)
    consumer = FakeConsumer(env).connect()
    consumer.enable(simple_config())
    env.settle()
    env.call(lambda: consumer.endpoint.observe_events(2))
    env.settle()
    assert not consumer.events
    env.call(lambda: producer.endpoint.notify_data_source_started(producer.instance().instance_id))
    env.settle()
    assert [e.all_data_sources_started for e in consumer.events] == [True]


def test_periodic_flush_and_incremental_state_clear(env: ServiceEnv) -> None:
    config = simple_config(flush_period_ms=100)
    config.incremental_state_config.clear_period_ms = 100
    producer = FakeProducer(env).connect()
    producer.register("test.ds", handles_incremental_state_clear=True)
    consumer = FakeConsumer(env).connect()
    consumer.enable(config)
    wait_for(lambda: sum(c.startswith("flush:") for c in producer.commands) >= 2)
    wait_for(lambda: "clear:1" in producer.commands)


def test_deferred_start(env: ServiceEnv) -> None:
    producer, consumer = _session(env, simple_config(deferred_start=True))
    assert producer.commands[-1] == "setup:1"
    env.call(consumer.endpoint.start_tracing)
    env.settle()
    assert producer.commands[-1] == "start:1"
    producer.write(producer.instance(), make_packet("deferred"), flush=True)
    consumer.stop()
    assert strings_of(consumer.read_trace()) == ["deferred"]


def _trigger_config(mode: int, stop_delay_ms: int = 0, timeout_ms: int = 10_000) -> TraceConfig:
    config = simple_config()
    config.trigger_config.trigger_mode = mode  # type: ignore[assignment]
    config.trigger_config.trigger_timeout_ms = timeout_ms
    config.trigger_config.triggers.add(name="go", stop_delay_ms=stop_delay_ms)
    return config


def test_start_trigger(env: ServiceEnv) -> None:
    # 2 s: the start and the write below come well before the delay ends the session.
    config = _trigger_config(TraceConfig.TriggerConfig.START_TRACING, stop_delay_ms=2000)
    producer, consumer = _session(env, config)
    assert producer.commands[-1] == "setup:1"
    env.call(lambda: producer.endpoint.activate_triggers(["unrelated", "go"]))
    env.settle()
    assert producer.commands[-1] == "start:1"
    producer.write(producer.instance(), make_packet("triggered"), flush=True)
    consumer.wait_disabled()  # stop_delay_ms became the session's duration
    trace = consumer.read_trace()
    assert strings_of(trace) == ["triggered"]
    triggers = [p.trigger for p in trace.packet if p.HasField("trigger")]
    assert [(t.trigger_name, t.producer_name, t.stop_delay_ms) for t in triggers] == [
        ("go", "test.producer", 2000)
    ]
    assert triggers[0].trusted_producer_uid == 1000


def test_start_trigger_that_never_comes(env: ServiceEnv) -> None:
    config = _trigger_config(TraceConfig.TriggerConfig.START_TRACING, timeout_ms=200)
    producer, consumer = _session(env, config)
    consumer.wait_disabled()
    assert not any(c.startswith("start:") for c in producer.commands)
    assert consumer.read() == b""


def test_stop_trigger(env: ServiceEnv) -> None:
    config = _trigger_config(TraceConfig.TriggerConfig.STOP_TRACING, stop_delay_ms=100)
    producer, consumer = _session(env, config)
    producer.write(producer.instance(), make_packet("kept"))
    # Waiting for the trigger, the session reads as empty.
    assert consumer.read() == b""
    env.call(lambda: producer.endpoint.activate_triggers(["go"]))
    consumer.wait_disabled()
    trace = consumer.read_trace()
    assert strings_of(trace) == ["kept"]
    assert trace.packet[3].trace_config.duration_ms == 10_000  # the trigger timeout


def test_trigger_producer_regex(env: ServiceEnv) -> None:
    config = _trigger_config(TraceConfig.TriggerConfig.START_TRACING)
    config.trigger_config.triggers[0].producer_name_regex = "allowed.*"
    producer, _ = _session(env, config)
    other = FakeProducer(env, name="allowed.one").connect()
    env.call(lambda: producer.endpoint.activate_triggers(["go"]))
    env.settle()
    assert not any(c.startswith("start:") for c in producer.commands)
    env.call(lambda: other.endpoint.activate_triggers(["go"]))
    env.settle()
    assert producer.commands[-1] == "start:1"


def test_detach_and_attach(env: ServiceEnv) -> None:
    producer, consumer = _session(env, simple_config())
    producer.write(producer.instance(), make_packet("while detached"), flush=True)
    env.call(lambda: consumer.endpoint.detach("key"))
    env.settle()
    assert consumer.detached == [True]
    env.call(consumer.endpoint.disconnect)
    env.settle()
    assert not producer.instance().stopped

    other_uid = FakeConsumer(env, uid=4321).connect()
    env.call(lambda: other_uid.endpoint.attach("key"))
    env.settle()
    assert other_uid.attached[0][0] is False

    again = FakeConsumer(env).connect()
    env.call(lambda: again.endpoint.attach("key"))
    env.settle()
    success, config = again.attached[0]
    assert success
    assert config.buffers[0].size_kb == 256
    again.stop()
    assert strings_of(again.read_trace()) == ["while detached"]


def test_detached_session_with_duration_ends_by_itself(env: ServiceEnv) -> None:
    producer, consumer = _session(env, simple_config(duration_ms=200))
    env.call(lambda: consumer.endpoint.detach("k"))
    wait_for(lambda: env.call(lambda: env.service.session(1)) is None)
    assert producer.instance().stopped


def test_observe_data_source_instances(env: ServiceEnv) -> None:
    producer = FakeProducer(env, name="observed").connect()
    producer.register("test.ds")
    consumer = FakeConsumer(env).connect()
    consumer.enable(simple_config(deferred_start=True))
    env.call(lambda: consumer.endpoint.observe_events(1))
    env.settle()
    env.call(consumer.endpoint.start_tracing)
    env.settle()
    consumer.stop()
    env.settle()
    changes = [
        (c.producer_name, c.data_source_name, c.state)
        for e in consumer.events
        for c in e.instance_state_changes
    ]
    stopped, started = 1, 2
    assert changes == [
        ("observed", "test.ds", stopped),  # CONFIGURED is reported as STOPPED, like upstream
        ("observed", "test.ds", started),
        ("observed", "test.ds", stopped),
    ]


def test_change_trace_config_adds_producers(env: ServiceEnv) -> None:
    first = FakeProducer(env, name="first").connect()
    second = FakeProducer(env, name="second").connect()
    first.register("test.ds")
    second.register("test.ds")
    config = simple_config()
    config.data_sources[0].producer_name_filter.append("first")
    consumer = FakeConsumer(env).connect()
    consumer.enable(config)
    env.settle()
    assert (len(first.instances), len(second.instances)) == (1, 0)
    config.data_sources[0].producer_name_filter.append("second")
    env.call(lambda: consumer.endpoint.change_trace_config(config))
    env.settle()
    assert (len(first.instances), len(second.instances)) == (1, 1)
    assert second.commands[-1] == "start:2"


def test_query_service_state_and_capabilities(env: ServiceEnv) -> None:
    producer = FakeProducer(env, name="queried", pid=99).connect(sdk_version="sdk 1")
    producer.register("test.ds")
    consumer = FakeConsumer(env).connect()
    consumer.enable(simple_config(unique_session_name="named"))
    env.settle()
    states: list[tuple[bool, TracingServiceState]] = []
    env.call(
        lambda: consumer.endpoint.query_service_state(False, lambda ok, s: states.append((ok, s)))
    )
    ok, state = states[0]
    assert ok
    assert [(p.name, p.pid, p.uid, p.sdk_version) for p in state.producers] == [
        ("queried", 99, 1000, "sdk 1")
    ]
    assert [d.ds_descriptor.name for d in state.data_sources] == ["test.ds"]
    assert [(s.unique_session_name, s.state, s.is_started) for s in state.tracing_sessions] == [
        ("named", "STARTED", True)
    ]
    assert state.num_sessions == state.num_sessions_started == 1

    caps: list[TracingServiceCapabilities] = []
    env.call(lambda: consumer.endpoint.query_capabilities(caps.append))
    # What upstream's service advertises now that CloneSession is served.
    assert caps[0].has_query_capabilities
    assert caps[0].has_trace_config_output_path
    assert caps[0].has_clone_session
    assert list(caps[0].observable_events) == [1, 2, 4]


def test_pending_flush_fails_when_the_session_is_freed(env: ServiceEnv) -> None:
    _, consumer = _session(env, simple_config(), ack_flushes=False)
    results: list[bool] = []
    env.call(lambda: consumer.endpoint.flush(30_000, results.append))
    env.call(consumer.endpoint.free_buffers)
    assert results == [False]


def test_flush_without_a_session_fails(env: ServiceEnv) -> None:
    consumer = FakeConsumer(env).connect()
    assert consumer.flush() is False
