"""traced against hostile producers and overflowing buffers (separate processes, real sockets)."""

from __future__ import annotations

import collections
import contextlib
import random
import socket
import struct
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from perfetto_protos.config.trace_config_pb2 import TraceConfig
from perfetto_testing import TIMEOUT, wait_for
from traced_testlib import ConsumerSession, Traced, fortesting_packets, make_config, start_producers

HOSTILE_MAIN = str(Path(__file__).with_name("ipc_hostile_main.py"))


@pytest.fixture
def traced() -> Iterator[Traced]:
    with tempfile.TemporaryDirectory() as directory, Traced(directory) as daemon:
        yield daemon


def _garbage(path: str, seed: int) -> None:
    """Sends junk frames, junk bytes and an oversized frame; traced may hang up at any point."""
    rng = random.Random(seed)
    messages = []
    for _ in range(20):
        body = rng.randbytes(rng.randrange(1, 200))
        messages.append(struct.pack("<I", len(body)) + body)
    messages += [rng.randbytes(500), struct.pack("<I", 1 << 30) + b"\0" * 64]
    with (
        socket.socket(socket.AF_UNIX) as sock,
        contextlib.suppress(BrokenPipeError, ConnectionResetError),
    ):
        sock.connect(path)
        for message in messages:
            sock.sendall(message)


def test_hostile_producers_never_crash_traced(traced: Traced) -> None:
    for seed in range(3):
        _garbage(traced.producer_socket, seed)
        _garbage(traced.consumer_socket, seed)
    honest = start_producers(traced.producer_socket, ["honest"], 300)
    hostile = subprocess.Popen(
        [sys.executable, HOSTILE_MAIN, traced.producer_socket],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    consumer = ConsumerSession(traced.consumer_socket)
    try:
        consumer.client.enable_tracing(make_config())
        honest[0].wait_line("WROTE")
        assert hostile.stdout is not None
        lines = [hostile.stdout.readline().strip() for _ in range(2)]
        assert lines == ["CONNECTED", "ATTACKED"]
        stats: list[Any] = []
        consumer.consumer.events.clear()
        consumer.client.get_trace_stats()
        wait_for(lambda: "on_trace_stats" in consumer.consumer.names())
        consumer.client.disable_tracing()
        consumer.wait_disabled()
        trace = consumer.read_trace()
        stats = [p.trace_stats for p in trace.packet if p.HasField("trace_stats")]
    finally:
        consumer.close()
        for producer in honest:
            producer.close()
        assert hostile.stdin is not None
        hostile.stdin.close()
        hostile.wait(TIMEOUT)
        assert hostile.stdout is not None
        hostile.stdout.close()
    assert traced.process.poll() is None
    texts = collections.Counter(p.for_testing.str.split("/")[0] for p in fortesting_packets(trace))
    assert texts["honest"] == 300
    honest_values = [
        p.for_testing.seq_value
        for p in fortesting_packets(trace)
        if p.for_testing.str.startswith("honest/")
    ]
    assert honest_values == list(range(300))
    assert texts["HOSTILE-GOOD"] == 1
    assert not {"HOSTILE-WRITER-ZERO", "HOSTILE-RESERVED", "HOSTILE-LYING-FRAGMENT"} & set(texts)
    assert stats
    assert stats[-1].invalid_packets >= 1
    assert stats[-1].chunks_discarded >= 1
    session = ConsumerSession(traced.consumer_socket)
    session.close()


@pytest.mark.parametrize(
    "policy", [TraceConfig.BufferConfig.RING_BUFFER, TraceConfig.BufferConfig.DISCARD]
)
def test_overflow_ring_keeps_the_newest_and_discard_the_oldest(traced: Traced, policy: int) -> None:
    producers = start_producers(traced.producer_socket, ["flood"], 3000, "--size", "200")
    consumer = ConsumerSession(traced.consumer_socket)
    try:
        consumer.client.enable_tracing(make_config(buffer_kb=128, fill_policy=policy))
        producers[0].wait_line("WROTE")
        consumer.client.disable_tracing()
        consumer.wait_disabled()
        trace = consumer.read_trace()
    finally:
        consumer.close()
        for producer in producers:
            producer.close()
    packets = fortesting_packets(trace)
    values = [p.for_testing.seq_value for p in packets]
    assert 0 < len(values) < 3000
    assert values == sorted(values)
    if policy == TraceConfig.BufferConfig.RING_BUFFER:
        assert values[-1] == 2999
        assert values[0] > 0
        assert packets[0].previous_packet_dropped
    else:
        assert values == list(range(len(values)))
    buffer_stats = [
        p.trace_stats.buffer_stats[0] for p in trace.packet if p.HasField("trace_stats")
    ]
    assert buffer_stats
    if policy == TraceConfig.BufferConfig.RING_BUFFER:
        assert buffer_stats[-1].chunks_overwritten > 0
    else:
        assert buffer_stats[-1].chunks_discarded > 0
