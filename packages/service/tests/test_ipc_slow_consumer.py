"""ReadBuffers at the consumer's pace, against a real traced over real sockets: a consumer
whose callback is slow gets every packet; one that stops reading for longer than traced's
`--consumer-timeout` is disconnected and never told that the read ended."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterator, Sequence

import pytest
from ipc_fakes import RecordingConsumer
from perfetto_protos.upstream import parse_upstream_trace
from perfetto_service import ConsumerIPCClient, TracePacketSlices
from perfetto_testing import TIMEOUT
from traced_testlib import (
    Traced,
    fortesting_packets,
    make_config,
    packets_as_trace,
    start_producers,
)

CONSUMER_TIMEOUT_S = 3.0  # a loaded machine's pause in the consumer's thread is shorter
PACKETS = 5000
SIZE = 2000  # ~10 MB: at 50 ms per ReadBuffers reply (<= 128 KiB) ~4 s, more than the timeout


class SlowConsumer(RecordingConsumer):
    """Sleeps `first_s` in its first `on_trace_data`, then `each_s` in every one."""

    def __init__(self, each_s: float, first_s: float = 0.0) -> None:
        super().__init__()
        self.each_s = each_s
        self.first_s = first_s
        self.calls = 0
        self.first_call = self.last_call_end = 0.0

    def on_trace_data(self, packets: Sequence[TracePacketSlices], has_more: bool) -> None:
        self.calls += 1
        if self.calls == 1:
            self.first_call = time.monotonic()
        time.sleep(self.first_s if self.calls == 1 and self.first_s else self.each_s)
        super().on_trace_data(packets, has_more)
        self.last_call_end = time.monotonic()


@pytest.fixture
def traced() -> Iterator[Traced]:
    with (
        tempfile.TemporaryDirectory() as directory,
        Traced(directory, "--consumer-timeout", str(CONSUMER_TIMEOUT_S)) as daemon,
    ):
        yield daemon


def _trace_into(traced: Traced, consumer: SlowConsumer) -> ConsumerIPCClient:
    """Records PACKETS packets with `consumer`'s client, stops, and starts reading them."""
    client = ConsumerIPCClient(traced.consumer_socket, consumer)
    client.connect()
    assert client.wait_connected(TIMEOUT)
    producers = start_producers(
        traced.producer_socket, ["big"], PACKETS, "--size", str(SIZE), "--shm-size", "4194304"
    )
    try:
        client.enable_tracing(make_config(buffer_kb=16 * 1024))
        producers[0].wait_line("WROTE")
        client.disable_tracing()
        assert consumer.disabled.wait(TIMEOUT)
        client.read_buffers()
    except BaseException:
        client.disconnect()
        raise
    finally:
        for producer in producers:
            producer.close()
    return client


def test_a_consumer_with_a_slow_callback_gets_every_packet(traced: Traced) -> None:
    consumer = SlowConsumer(each_s=0.05)
    client = _trace_into(traced, consumer)
    try:
        assert consumer.read_done.wait(TIMEOUT)
    finally:
        client.disconnect()
    # The consumer's own clock, from its first callback to the end of its last: the read outlasted
    # traced's timeout without the consumer being cut off.
    assert consumer.last_call_end - consumer.first_call > CONSUMER_TIMEOUT_S, consumer.calls
    values = [
        p.for_testing.seq_value
        for p in fortesting_packets(parse_upstream_trace(packets_as_trace(consumer.packets)))
    ]
    assert values == list(range(PACKETS))


def test_a_consumer_that_stops_reading_is_cut_off_and_told(traced: Traced) -> None:
    consumer = SlowConsumer(each_s=0.0, first_s=CONSUMER_TIMEOUT_S + 2.5)
    client = _trace_into(traced, consumer)
    try:
        assert consumer.disconnected.wait(TIMEOUT)
    finally:
        client.disconnect()
    assert not consumer.read_done.is_set()
    assert ("on_trace_data", False) not in consumer.events
    assert len(consumer.packets) < PACKETS
