"""What a producer can make a real traced hold, and how long a consumer's regex can take.

Writer ids are upstream's (1 to 32767 per producer): ids beyond are refused, so a flood of
RegisterTraceWriter calls cannot grow traced. A producer_name_regex_filter runs on RE2, so a
pattern that backtracks exponentially in a backtracking engine does not stall other clients.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from perfetto_protos.common.tracing_service_capabilities_pb2 import TracingServiceCapabilities
from perfetto_protos.ipc import producer_port_pb2 as pb
from perfetto_smb import MAX_WRITER_ID
from perfetto_testing import TIMEOUT
from traced_testlib import ConsumerSession, RawClient, Traced, make_config, start_producers

WRITERS = 300_000
ANSWERED_WITHIN = 30.0
"""Seconds: another client's request under heavy load. The backtracking stall this bounds was
22 s for a name of 28 'a's and doubles with every 'a': the regex test's 34 make it 20 minutes."""


@pytest.fixture
def traced(tmp_path: Path) -> Iterator[Traced]:
    with Traced(str(tmp_path)) as traced:
        yield traced


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for {pid}")


def _connected_producer(path: str) -> tuple[RawClient, int, dict[str, int]]:
    client = RawClient(path)
    reply = client.bind("ProducerPort")
    assert reply.success
    methods = {method.name: method.id for method in reply.methods}
    request = pb.InitializeConnectionRequest(producer_name="flood")
    init = client.invoke(
        reply.service_id, methods["InitializeConnection"], request.SerializeToString()
    )
    assert init.success
    return client, reply.service_id, methods


def test_register_trace_writer_flood_is_refused_beyond_upstream_ids(traced: Traced) -> None:
    client, service_id, methods = _connected_producer(traced.producer_socket)
    try:
        method = methods["RegisterTraceWriter"]
        for writer_id in (1, MAX_WRITER_ID):  # the allocator's pages are there first
            args = pb.RegisterTraceWriterRequest(trace_writer_id=writer_id, target_buffer=1)
            client.sock.sendall(
                client.frame(service_id, method, args.SerializeToString(), drop_reply=True)
            )
        assert client.invoke(service_id, methods["Sync"], b"").success
        before = _rss_kib(traced.pid)
        for first in range(1, WRITERS + 1, 10_000):
            client.sock.sendall(
                b"".join(
                    client.frame(
                        service_id,
                        method,
                        pb.RegisterTraceWriterRequest(
                            trace_writer_id=writer_id, target_buffer=1
                        ).SerializeToString(),
                        drop_reply=True,
                    )
                    for writer_id in range(first, first + 10_000)
                )
            )
        assert client.invoke(service_id, methods["Sync"], b"").success
        grown_kib = _rss_kib(traced.pid) - before
    finally:
        client.close()
    # 300,000 writers held took ~18 MB; 32,767 at most take ~1-2 MB.
    assert grown_kib < 8 * 1024, f"traced grew by {grown_kib} KiB"
    traced.wait_log("RegisterTraceWriter calls were refused")
    refusals = [line for line in traced.log if "RegisterTraceWriter" in line]
    assert len(refusals) == 2, refusals
    logged = f'"flood": RegisterTraceWriter with writer id {MAX_WRITER_ID + 1} refused'
    assert logged in refusals[0]
    refused = WRITERS - MAX_WRITER_ID
    assert f'"flood" left; {refused} RegisterTraceWriter calls were refused' in refusals[1]


def _answer_time(consumer: ConsumerSession) -> float:
    """Seconds until the service answers QueryCapabilities."""
    answered = threading.Event()

    def on_reply(_capabilities: TracingServiceCapabilities) -> None:
        answered.set()

    started = time.monotonic()
    consumer.client.query_capabilities(on_reply)
    assert answered.wait(TIMEOUT * 4)
    return time.monotonic() - started


@pytest.mark.parametrize(("pattern", "started"), [("(a+)+b", False), ("(a+)+", True), ("a", False)])
def test_producer_name_regex_filter_runs_in_linear_time_and_matches_whole_names(
    traced: Traced, pattern: str, started: bool
) -> None:
    name = "a" * 34
    producers = start_producers(traced.producer_socket, [name], 1)
    regex_consumer = other = None
    try:
        regex_consumer = ConsumerSession(traced.consumer_socket)
        other = ConsumerSession(traced.consumer_socket)
        config = make_config()
        config.data_sources[0].producer_name_regex_filter.append(pattern)
        regex_consumer.client.enable_tracing(config)
        assert _answer_time(other) < ANSWERED_WITHIN
        if started:
            producers[0].wait_line("STARTED")
        regex_consumer.client.disable_tracing()
        regex_consumer.wait_disabled()
        assert producers[0].count("STARTED") == int(started)
    finally:
        for consumer in (regex_consumer, other):
            if consumer is not None:
                consumer.close()
        for producer in producers:
            producer.close()
