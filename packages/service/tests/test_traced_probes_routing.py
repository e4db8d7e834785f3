"""What traced_probes' producer does with the instances a session starts: the threads one
data source saw (ftrace's `take_seen_pids`) go to the process_stats instances of that session
only; a data source that fails to start still lets the session go on."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Iterator

import pytest
from perfetto_probes import DATA_SOURCES, PacketSink, ProbesError
from perfetto_protos.config.data_source_config_pb2 import DataSourceConfig
from perfetto_protos.trace.trace_packet_pb2 import TracePacket
from perfetto_service.traced_probes import ProbesProducer


class FakeWriter:
    def __init__(self) -> None:
        self.packets: list[TracePacket] = []
        self.flushes = 0
        self.flushed_packets = 0

    def write_packet(self, data: bytes) -> None:
        self.packets.append(TracePacket.FromString(data))

    def flush(self) -> None:
        self.flushes += 1
        self.flushed_packets = len(self.packets)


class FakeEndpoint:
    """The calls of a ProducerIPCClient traced_probes makes, recorded."""

    def __init__(self) -> None:
        self.writers: dict[int, FakeWriter] = {}
        self.calls: list[tuple[str, int]] = []

    def create_trace_writer(self, target_buffer: int) -> FakeWriter:
        writer = self.writers[target_buffer] = FakeWriter()
        return writer

    def notify_data_source_started(self, instance_id: int) -> None:
        self.calls.append(("started", instance_id))

    def notify_data_source_stopped(self, instance_id: int) -> None:
        self.calls.append(("stopped", instance_id))

    def notify_flush_complete(self, request_id: int) -> None:
        self.calls.append(("flushed", request_id))

    def disconnect(self) -> None:
        self.calls.append(("disconnected", 0))


class SeesThisProcess:
    """Stands in for linux.ftrace: has seen this process's main thread, once."""

    def __init__(self, config: DataSourceConfig, sink: PacketSink) -> None:
        self._pids = {os.getpid()}

    def start(self) -> None:
        pass

    def poll(self, now_ns: int) -> int | None:
        return None

    def flush(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def take_seen_pids(self) -> set[int]:
        pids, self._pids = self._pids, set()
        return pids


class SeesThisProcessAtFlush(SeesThisProcess):
    """Stands in for linux.ftrace whose last read, at a flush, saw this process."""

    def __init__(self, config: DataSourceConfig, sink: PacketSink) -> None:
        self._pids = set()

    def flush(self) -> None:
        self._pids = {os.getpid()}


class FailsInPoll(SeesThisProcess):
    """A data source whose reads fail once it runs (a CPU gone, a file removed)."""

    stopped = 0

    def poll(self, now_ns: int) -> int | None:
        raise ProbesError("cannot read /nowhere: No such file or directory")

    def stop(self) -> None:
        FailsInPoll.stopped += 1


@pytest.fixture
def producer(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[ProbesProducer, FakeEndpoint]]:
    monkeypatch.setitem(DATA_SOURCES, "linux.ftrace", f"{__name__}:SeesThisProcess")
    monkeypatch.setitem(DATA_SOURCES, "test.ftrace_at_flush", f"{__name__}:SeesThisProcessAtFlush")
    monkeypatch.setitem(DATA_SOURCES, "test.fails_in_poll", f"{__name__}:FailsInPoll")
    monkeypatch.setitem(DATA_SOURCES, "test.missing", "perfetto_probes.no_such_module:X")
    loop = asyncio.new_event_loop()
    endpoint = FakeEndpoint()
    probes = ProbesProducer(loop, "unused", lambda: None, lambda: None)
    probes._endpoint = endpoint  # type: ignore[assignment]
    try:
        yield probes, endpoint
    finally:
        probes.close()
        loop.close()


def _config(name: str, session: int, buffer: int) -> DataSourceConfig:
    return DataSourceConfig(name=name, tracing_session_id=session, target_buffer=buffer)


def test_seen_threads_go_to_the_process_stats_of_their_session_only(
    producer: tuple[ProbesProducer, FakeEndpoint],
) -> None:
    probes, endpoint = producer
    probes.start_data_source(1, _config("linux.process_stats", session=7, buffer=1))
    probes.start_data_source(2, _config("linux.process_stats", session=8, buffer=2))
    probes.start_data_source(3, _config("test.missing", session=7, buffer=3))
    probes.start_data_source(4, _config("linux.ftrace", session=7, buffer=4))
    assert endpoint.calls == [("started", 1), ("started", 2), ("started", 3), ("started", 4)]
    written = [p.process_tree for p in endpoint.writers[1].packets]
    assert [proc.pid for tree in written for proc in tree.processes] == [os.getpid()]
    assert endpoint.writers[2].packets == []
    probes.flush(5, [1, 2, 3, 4])
    assert endpoint.calls[-1] == ("flushed", 5)
    assert all(endpoint.writers[i].flushes == 1 for i in (1, 2, 4))
    for instance_id in (1, 2, 3, 4):
        probes.stop_data_source(instance_id)
    assert endpoint.calls[-4:] == [("stopped", 1), ("stopped", 2), ("stopped", 3), ("stopped", 4)]


def test_threads_seen_at_a_flush_are_in_that_flush(
    producer: tuple[ProbesProducer, FakeEndpoint],
) -> None:
    probes, endpoint = producer
    probes.start_data_source(1, _config("linux.process_stats", session=7, buffer=1))
    probes.start_data_source(2, _config("test.ftrace_at_flush", session=7, buffer=2))
    assert endpoint.writers[1].packets == []
    probes.flush(3, [1, 2])
    assert endpoint.writers[1].flushed_packets == 1
    assert endpoint.writers[1].packets[0].process_tree.processes[0].pid == os.getpid()


def test_a_data_source_failing_in_poll_is_one_line_and_still_stopped(
    producer: tuple[ProbesProducer, FakeEndpoint], caplog: pytest.LogCaptureFixture
) -> None:
    probes, endpoint = producer
    FailsInPoll.stopped = 0
    with caplog.at_level(logging.INFO, logger="traced_probes"):
        probes.start_data_source(1, _config("test.fails_in_poll", session=7, buffer=1))
        probes.start_data_source(2, _config("linux.process_stats", session=7, buffer=2))
        probes.stop_data_source(1)
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == ["test.fails_in_poll: cannot read /nowhere: No such file or directory"]
    assert all(r.exc_info is None for r in caplog.records)
    assert FailsInPoll.stopped == 1
    assert endpoint.calls == [("started", 1), ("started", 2), ("stopped", 1)]
