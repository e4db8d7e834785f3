"""CloneSession end to end: a running session snapshotted by another consumer, over sockets."""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Iterator

import pytest
from perfetto_protos.common.observable_events_pb2 import ObservableEvents
from perfetto_protos.config.trace_config_pb2 import TraceConfig
from perfetto_service import SessionCloned
from perfetto_testing import TIMEOUT, wait_for
from traced_testlib import ConsumerSession, Traced, fortesting_packets, make_config, start_producers


@pytest.fixture
def traced() -> Iterator[Traced]:
    with tempfile.TemporaryDirectory() as directory, Traced(directory) as daemon:
        yield daemon


def _clone(traced: Traced, **selector: object) -> tuple[SessionCloned, ConsumerSession]:
    cloner = ConsumerSession(traced.consumer_socket)
    answers: list[SessionCloned] = []
    answered = threading.Event()

    def on_cloned(result: SessionCloned) -> None:
        answers.append(result)
        answered.set()

    cloner.client.clone_session(on_cloned, **selector)  # type: ignore[arg-type]
    assert answered.wait(TIMEOUT)
    return answers[0], cloner


def test_clone_snapshots_a_running_session_that_keeps_tracing(traced: Traced) -> None:
    (producer,) = start_producers(traced.producer_socket, ["alpha"], 20)
    owner = ConsumerSession(traced.consumer_socket)
    try:
        config = make_config(unique_session_name="running")
        config.trace_uuid_lsb, config.trace_uuid_msb = 1234, 5678
        owner.client.enable_tracing(config)
        producer.wait_line("WROTE")
        for selector in ({"session_id": 1}, {"unique_session_name": "running"}):
            result, cloner = _clone(traced, **selector)
            try:
                assert result.success, result.error
                assert result.uuid_lsb == 1234  # kept, as upstream does
                assert result.uuid_msb != 5678
                trace = cloner.read_trace()
            finally:
                cloner.close()
            values = [p.for_testing.seq_value for p in fortesting_packets(trace)]
            assert values == list(range(20))
            assert any(p.HasField("trace_config") for p in trace.packet)
        assert not owner.consumer.disabled.is_set()  # the source session is still running
        owner.client.disable_tracing()
        assert owner.wait_disabled() == ""
        original = owner.read_trace()
        assert len(fortesting_packets(original)) == 20
    finally:
        owner.close()
        producer.close()


def test_clone_of_an_unknown_session_fails_with_upstreams_error(traced: Traced) -> None:
    result, cloner = _clone(traced, session_id=42)
    cloner.close()
    assert not result.success
    assert result.error == "Tracing session not found"
    result, cloner = _clone(traced, unique_session_name="nope")
    cloner.close()
    assert result.error == "Tracing session not found"


def test_clone_snapshot_trigger_notifies_the_observing_consumer(traced: Traced) -> None:
    (producer,) = start_producers(traced.producer_socket, ["alpha"], 3)
    owner = ConsumerSession(traced.consumer_socket)
    try:
        config = make_config()
        config.trigger_config.trigger_mode = TraceConfig.TriggerConfig.CLONE_SNAPSHOT
        config.trigger_config.trigger_timeout_ms = 60_000
        config.trigger_config.triggers.add(name="snap")
        owner.client.observe_events(ObservableEvents.TYPE_CLONE_TRIGGER_HIT)
        owner.client.enable_tracing(config)
        producer.wait_line("WROTE")
        (trigger,) = start_producers(traced.producer_socket, ["trig"], 0, "--trigger", "snap")
        try:  # kept connected until the trigger took effect
            wait_for(lambda: "on_observable_events" in owner.consumer.names(), TIMEOUT)
        finally:
            trigger.close()
        observed = [
            ObservableEvents.FromString(value)
            for name, value in owner.consumer.events
            if name == "on_observable_events"
        ]
        hits = [e for e in observed if e.HasField("clone_trigger_hit")]
        assert hits[0].clone_trigger_hit.tracing_session_id == 1
        assert hits[0].clone_trigger_hit.trigger_name == "snap"
        assert hits[0].clone_trigger_hit.producer_name == "trig"
        result, cloner = _clone(traced, session_id=1)
        try:
            assert result.success, result.error
            trace = cloner.read_trace()
        finally:
            cloner.close()
        assert len(fortesting_packets(trace)) == 3
        assert [p.trigger.trigger_name for p in trace.packet if p.HasField("trigger")] == ["snap"]
    finally:
        owner.close()
        producer.close()
