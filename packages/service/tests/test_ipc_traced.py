"""End to end: a traced process, producer processes and a consumer, over real sockets."""

from __future__ import annotations

import collections
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from perfetto_protos.config.trace_config_pb2 import TraceConfig
from perfetto_protos.upstream import parse_upstream_trace
from perfetto_service.ipc.consumer._consumer_ipc_client import CONNECTION_LOST
from perfetto_testing import TIMEOUT, wait_for
from traced_testlib import (
    ConsumerSession,
    ProducerProcess,
    Traced,
    fortesting_packets,
    make_config,
    start_producers,
)

CONSUMER_MAIN = str(Path(__file__).with_name("ipc_consumer_main.py"))


@pytest.fixture
def traced() -> Iterator[Traced]:
    with tempfile.TemporaryDirectory() as directory, Traced(directory) as daemon:
        yield daemon


@pytest.fixture
def consumer(traced: Traced) -> Iterator[ConsumerSession]:
    session = ConsumerSession(traced.consumer_socket)
    yield session
    session.close()


def _by_writer(packets: list[Any]) -> dict[tuple[str, int], list[int]]:
    """seq_values per (producer/writer label, trusted sequence id)."""
    found: dict[tuple[str, int], list[int]] = collections.defaultdict(list)
    for packet in packets:
        label = packet.for_testing.str.rsplit("/", 1)[0]
        found[(label, packet.trusted_packet_sequence_id)].append(packet.for_testing.seq_value)
    return found


def test_producers_packets_arrive_whole_with_trusted_fields(
    traced: Traced, consumer: ConsumerSession
) -> None:
    names = ["alpha", "beta", "gamma"]
    producers = start_producers(traced.producer_socket, names, 300, "--writers", "2")
    try:
        consumer.client.enable_tracing(make_config())
        for producer in producers:
            producer.wait_line("WROTE", 2)
        consumer.client.disable_tracing()
        assert consumer.wait_disabled() == ""
        trace = consumer.read_trace()
    finally:
        for producer in producers:
            producer.close()
    packets = fortesting_packets(trace)
    assert len(packets) == 3 * 2 * 300
    by_writer = _by_writer(packets)
    assert len(by_writer) == 6
    assert len({sequence for _label, sequence in by_writer}) == 6
    for values in by_writer.values():
        assert values == list(range(300))
    pids = {producer.name: producer.pid for producer in producers}
    for packet in packets:
        assert packet.trusted_uid == os.getuid()
        assert packet.trusted_pid == pids[packet.for_testing.str.split("/")[0]]
        assert packet.trusted_packet_sequence_id >= 2
    service_packets = [p for p in trace.packet if p.trusted_packet_sequence_id == 1]
    assert any(p.HasField("trace_config") for p in service_packets)


def test_write_into_file_with_passed_fd(traced: Traced, consumer: ConsumerSession) -> None:
    producers = start_producers(traced.producer_socket, ["writer"], 500)
    try:
        config = make_config(write_into_file=True, file_write_period_ms=100)
        with tempfile.NamedTemporaryFile() as output:
            consumer.client.enable_tracing(config, output.fileno())
            producers[0].wait_line("WROTE")
            consumer.client.disable_tracing()
            assert consumer.wait_disabled() == ""
            trace = parse_upstream_trace(open(output.name, "rb").read())  # noqa: SIM115
    finally:
        for producer in producers:
            producer.close()
    values = [p.for_testing.seq_value for p in fortesting_packets(trace)]
    assert values == list(range(500))


def test_flush_times_out_with_a_producer_that_never_acks(
    traced: Traced, consumer: ConsumerSession
) -> None:
    producers = start_producers(traced.producer_socket, ["silent"], 10, "--no-flush-ack")
    try:
        consumer.client.enable_tracing(make_config())
        producers[0].wait_line("WROTE")
        results: list[bool] = []
        consumer.client.flush(300, results.append)
        wait_for(lambda: results)
        assert results == [False]
        assert producers[0].count("FLUSH") >= 1
        consumer.client.disable_tracing()
        consumer.wait_disabled()
    finally:
        for producer in producers:
            producer.close()


def test_flush_succeeds_when_producers_ack(traced: Traced, consumer: ConsumerSession) -> None:
    producers = start_producers(traced.producer_socket, ["one", "two"], 10)
    try:
        consumer.client.enable_tracing(make_config())
        for producer in producers:
            producer.wait_line("WROTE")
        results: list[bool] = []
        consumer.client.flush(5000, results.append)
        wait_for(lambda: results)
        assert results == [True]
    finally:
        for producer in producers:
            producer.close()


def test_producer_killed_mid_session_keeps_committed_data(
    traced: Traced, consumer: ConsumerSession
) -> None:
    producers = start_producers(traced.producer_socket, ["victim", "survivor"], 200)
    try:
        consumer.client.enable_tracing(make_config())
        for producer in producers:
            producer.wait_line("WROTE")
        producers[0].kill()
        consumer.client.disable_tracing()
        consumer.wait_disabled()
        trace = consumer.read_trace()
    finally:
        for producer in producers:
            producer.close()
    by_label: dict[str, list[int]] = collections.defaultdict(list)
    for packet in fortesting_packets(trace):
        by_label[packet.for_testing.str.split("/")[0]].append(packet.for_testing.seq_value)
    assert by_label["victim"] == list(range(200))
    assert by_label["survivor"] == list(range(200))


def test_consumer_is_told_the_connection_was_lost_when_traced_dies(
    traced: Traced, consumer: ConsumerSession
) -> None:
    consumer.client.enable_tracing(make_config())
    flushed = threading.Event()
    consumer.client.flush(1000, lambda _ok: flushed.set())
    assert flushed.wait(TIMEOUT)  # the session exists
    traced.process.kill()
    assert consumer.wait_disabled() == CONNECTION_LOST
    assert consumer.consumer.disconnected.wait(TIMEOUT)


def test_traced_logs_sessions_and_producers(traced: Traced, consumer: ConsumerSession) -> None:
    producers = start_producers(traced.producer_socket, ["logged"], 10)
    try:
        consumer.wait_data_source("logged")  # else the session may start with 0 instances
        consumer.client.enable_tracing(make_config(buffer_kb=1024, unique_session_name="s"))
        producers[0].wait_line("WROTE")
        consumer.client.disable_tracing()
        consumer.wait_disabled()
        consumer.client.free_buffers()
        traced.wait_log("Tracing session 1 ended")
    finally:
        for producer in producers:
            producer.close()
    traced.wait_log('Producer 1 "logged" disconnected')
    log = "\n".join(traced.log)
    assert 'Producer 1 "logged" connected, uid=' in log
    assert (
        "Configured tracing session 1, #sources:1, duration:0 ms, #buffers:1, "
        "total buffer size:1024 KB, total sessions:1, uid:" in log
    )
    assert 'session name: "s"' in log
    assert "Started tracing session 1, #data source instances:1" in log
    ended = next(line for line in traced.log if "Tracing session 1 ended" in line)
    assert "total sessions:0, bytes written:" in ended
    assert "bytes written:0," not in ended
    assert "Consumer connected" not in log  # debug level


def test_traced_verbose_logs_at_debug_level() -> None:
    with tempfile.TemporaryDirectory() as directory, Traced(directory, "--verbose") as daemon:
        session = ConsumerSession(daemon.consumer_socket)
        try:
            answered = threading.Event()
            session.client.query_capabilities(lambda _caps: answered.set())
            assert answered.wait(TIMEOUT)
            daemon.wait_log("Consumer connected, uid=")
        finally:
            session.close()
        daemon.wait_log("Consumer disconnected")


def test_consumer_killed_mid_session_frees_the_session(traced: Traced) -> None:
    producers = start_producers(traced.producer_socket, ["p"], 5)
    try:
        first = ConsumerSession(traced.consumer_socket)
        first.client.enable_tracing(make_config())
        producers[0].wait_line("STARTED")
        first.close()
        producers[0].wait_line("STOPPED")
        second = ConsumerSession(traced.consumer_socket)
        try:
            states: list[Any] = []
            second.client.query_service_state(False, lambda ok, state: states.append(state))
            wait_for(lambda: states)
            assert states[0].num_sessions == 0
            assert [p.name for p in states[0].producers] == ["p"]
        finally:
            second.close()
    finally:
        for producer in producers:
            producer.close()


def test_start_trigger_starts_the_session(traced: Traced, consumer: ConsumerSession) -> None:
    config = make_config()
    config.trigger_config.trigger_mode = TraceConfig.TriggerConfig.START_TRACING
    config.trigger_config.trigger_timeout_ms = 20000
    config.trigger_config.triggers.add(name="go", stop_delay_ms=1)
    producers = start_producers(traced.producer_socket, ["data"], 20)
    try:
        consumer.client.enable_tracing(config)
        wait_for(lambda: _session_count(consumer) == 1)
        assert producers[0].count("STARTED") == 0
        trigger = ProducerProcess(traced.producer_socket, "trigger", 0, "--trigger", "go")
        try:
            producers[0].wait_line("STARTED")
            producers[0].wait_line("WROTE")
        finally:
            trigger.close()
        consumer.client.disable_tracing()
        consumer.wait_disabled()
        trace = consumer.read_trace()
    finally:
        for producer in producers:
            producer.close()
    assert [p.for_testing.seq_value for p in fortesting_packets(trace)] == list(range(20))
    assert any(p.trigger.trigger_name == "go" for p in trace.packet if p.HasField("trigger"))


def _session_count(session: ConsumerSession) -> int:
    states: list[Any] = []
    session.client.query_service_state(True, lambda ok, state: states.append(state))
    wait_for(lambda: states)
    return int(states[0].num_sessions)


def test_detach_and_attach(traced: Traced) -> None:
    producers = start_producers(traced.producer_socket, ["kept"], 50)
    try:
        first = ConsumerSession(traced.consumer_socket)
        config = make_config(write_into_file=True, output_path="", duration_ms=0)
        with tempfile.NamedTemporaryFile() as output:
            first.client.enable_tracing(config, output.fileno())
            producers[0].wait_line("WROTE")
            first.client.detach("my-key")
            wait_for(lambda: "on_detach" in first.consumer.names())
            assert ("on_detach", True) in first.consumer.events
            first.close()
            assert producers[0].count("STOPPED") == 0
            second = ConsumerSession(traced.consumer_socket)
            try:
                second.client.attach("wrong-key")
                second.client.attach("my-key")
                wait_for(lambda: second.consumer.names().count("on_attach") == 2)
                failed, attached = (e[1] for e in second.consumer.events if e[0] == "on_attach")
                assert failed[0] is False
                assert attached[0] is True
                second.client.disable_tracing()
                second.wait_disabled()
            finally:
                second.close()
            trace = parse_upstream_trace(open(output.name, "rb").read())  # noqa: SIM115
    finally:
        for producer in producers:
            producer.close()
    assert [p.for_testing.seq_value for p in fortesting_packets(trace)] == list(range(50))


def test_twenty_producers_at_once(traced: Traced, consumer: ConsumerSession) -> None:
    names = [f"many{n:02d}" for n in range(20)]
    producers = start_producers(traced.producer_socket, names, 100)
    try:
        consumer.client.enable_tracing(make_config(buffer_kb=8192))
        for producer in producers:
            producer.wait_line("WROTE")
        consumer.client.disable_tracing()
        consumer.wait_disabled()
        trace = consumer.read_trace()
    finally:
        for producer in producers:
            producer.close()
    by_label: dict[str, list[int]] = collections.defaultdict(list)
    for packet in fortesting_packets(trace):
        by_label[packet.for_testing.str.split("/")[0]].append(packet.for_testing.seq_value)
    assert sorted(by_label) == names
    for values in by_label.values():
        assert values == list(range(100))


def test_consumer_sigkilled_mid_session_stops_its_session(traced: Traced) -> None:
    producers = start_producers(traced.producer_socket, ["orphan"], 5)
    killed = subprocess.Popen(
        [sys.executable, CONSUMER_MAIN, traced.consumer_socket],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert killed.stdout is not None
        assert killed.stdout.readline().strip() == "ENABLED"
        producers[0].wait_line("STARTED")
        killed.send_signal(signal.SIGKILL)
        killed.wait(TIMEOUT)
        producers[0].wait_line("STOPPED")
        session = ConsumerSession(traced.consumer_socket)
        try:
            assert _session_count(session) == 0
        finally:
            session.close()
    finally:
        if killed.poll() is None:
            killed.kill()
            killed.wait(TIMEOUT)
        if killed.stdout is not None:
            killed.stdout.close()
        for producer in producers:
            producer.close()
    assert traced.process.poll() is None


def test_stop_trigger_ends_the_session(traced: Traced, consumer: ConsumerSession) -> None:
    config = make_config()
    config.trigger_config.trigger_mode = TraceConfig.TriggerConfig.STOP_TRACING
    config.trigger_config.trigger_timeout_ms = 30000
    config.trigger_config.triggers.add(name="halt", stop_delay_ms=200)
    producers = start_producers(traced.producer_socket, ["data"], 30)
    try:
        consumer.client.enable_tracing(config)
        producers[0].wait_line("WROTE")
        assert not consumer.consumer.disabled.is_set()
        trigger = ProducerProcess(traced.producer_socket, "trigger", 0, "--trigger", "halt")
        try:
            assert consumer.wait_disabled() == ""
        finally:
            trigger.close()
        trace = consumer.read_trace()
    finally:
        for producer in producers:
            producer.close()
    assert [p.for_testing.seq_value for p in fortesting_packets(trace)] == list(range(30))
    assert any(p.trigger.trigger_name == "halt" for p in trace.packet if p.HasField("trigger"))


def _free_tcp_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_tcp_producer_uses_shared_memory_emulation() -> None:
    tcp = f"127.0.0.1:{_free_tcp_port()}"
    with (
        tempfile.TemporaryDirectory() as directory,
        Traced(directory, extra_producer_sockets=[tcp]) as daemon,
    ):
        producers = start_producers(tcp, ["remote"], 400, "--size", "300")
        producers += start_producers(daemon.producer_socket, ["local"], 400, "--size", "300")
        consumer = ConsumerSession(daemon.consumer_socket)
        try:
            consumer.client.enable_tracing(make_config())
            for producer in producers:
                producer.wait_line("WROTE")
            consumer.client.disable_tracing()
            consumer.wait_disabled()
            trace = consumer.read_trace()
        finally:
            consumer.close()
            for producer in producers:
                producer.close()
    by_label: dict[str, list[int]] = collections.defaultdict(list)
    for packet in fortesting_packets(trace):
        by_label[packet.for_testing.str.split("/")[0]].append(packet.for_testing.seq_value)
    assert by_label["remote"] == list(range(400))
    assert by_label["local"] == list(range(400))


def test_producer_provided_smb_is_adopted_and_used(
    traced: Traced, consumer: ConsumerSession
) -> None:
    producers = start_producers(
        traced.producer_socket, ["own-smb"], 3000, "--own-smb", str(256 * 1024), "--size", "100"
    )
    try:
        assert "ADOPTED" in producers[0].lines
        consumer.client.enable_tracing(make_config())
        producers[0].wait_line("WROTE")
        consumer.client.disable_tracing()
        consumer.wait_disabled()
        trace = consumer.read_trace()
    finally:
        for producer in producers:
            producer.close()
    assert [p.for_testing.seq_value for p in fortesting_packets(trace)] == list(range(3000))
