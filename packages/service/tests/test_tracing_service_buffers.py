"""Central buffers under overflow (RING_BUFFER vs DISCARD), stats, and write_into_file."""

from __future__ import annotations

import os
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from perfetto_protos.config.trace_config_pb2 import TraceConfig
from perfetto_protos.upstream import parse_upstream_trace
from perfetto_testing import wait_for
from tracing_service_harness import (
    FakeConsumer,
    FakeProducer,
    ServiceEnv,
    make_packet,
    producer_packets,
    service_packet_kinds,
    simple_config,
    strings_of,
)

pytestmark = pytest.mark.timeout(60)

_PAD = "x" * 180


@pytest.fixture
def env() -> Iterator[ServiceEnv]:
    service_env = ServiceEnv(uid=os.getuid())
    yield service_env
    service_env.close()


def _start(env: ServiceEnv, config: TraceConfig) -> tuple[FakeProducer, FakeConsumer]:
    producer = FakeProducer(env).connect()
    producer.register("test.ds")
    consumer = FakeConsumer(env).connect()
    consumer.enable(config)
    env.settle()
    return producer, consumer


def _write_numbered(producer: FakeProducer, start: int, count: int) -> None:
    inst = producer.instance()
    for first in range(start, start + count, 100):
        batch = range(first, min(first + 100, start + count))
        producer.write(inst, *(make_packet(f"{i:06d} {_PAD}") for i in batch), flush=True)


def _numbers(trace: Any) -> list[int]:
    return [int(s.split()[0]) for s in strings_of(trace)]


def _buffer_stats(trace: Any) -> Any:
    stats = [p.trace_stats for p in trace.packet if p.HasField("trace_stats")]
    assert stats
    return stats[-1].buffer_stats[0]


def test_ring_buffer_keeps_the_newest_and_marks_the_loss(env: ServiceEnv) -> None:
    producer, consumer = _start(env, simple_config(buffer_kb=64))
    _write_numbered(producer, 0, 2000)  # ~400 KB through a 64 KiB buffer
    consumer.stop()
    trace = consumer.read_trace()

    numbers = _numbers(trace)
    assert 100 < len(numbers) < 400
    assert numbers == list(range(numbers[0], 2000))  # a contiguous run ending with the last
    assert producer_packets(trace)[0].previous_packet_dropped
    stats = _buffer_stats(trace)
    assert stats.buffer_size == 64 * 1024
    assert stats.chunks_overwritten > 0
    assert stats.write_wrap_count > 0
    assert stats.chunks_written == stats.chunks_overwritten + stats.chunks_read
    assert stats.chunks_discarded == 0


def test_discard_keeps_the_oldest_and_counts_the_rest(env: ServiceEnv) -> None:
    config = simple_config(buffer_kb=64, fill_policy=TraceConfig.BufferConfig.DISCARD)
    producer, consumer = _start(env, config)
    _write_numbered(producer, 0, 2000)
    consumer.stop()
    trace = consumer.read_trace()

    numbers = _numbers(trace)
    assert 100 < len(numbers) < 400
    assert numbers == list(range(len(numbers)))  # a contiguous run from the first
    stats = _buffer_stats(trace)
    assert stats.chunks_discarded > 0
    assert stats.chunks_overwritten == 0
    # All but (at most) the last chunk, whose last packet continued into a discarded one.
    assert stats.chunks_written - 1 <= stats.chunks_read <= stats.chunks_written


def test_reads_are_destructive_and_resume(env: ServiceEnv) -> None:
    producer, consumer = _start(env, simple_config(buffer_kb=1024))
    _write_numbered(producer, 0, 300)
    first = consumer.read_trace()
    _write_numbered(producer, 300, 300)
    consumer.stop()
    second = consumer.read_trace()

    assert _numbers(first) == list(range(300))
    assert _numbers(second) == list(range(300, 600))
    # The sequence keeps its id across reads and is not marked as lossy the second time.
    assert {p.trusted_packet_sequence_id for p in producer_packets(first)} == {2}
    assert {p.trusted_packet_sequence_id for p in producer_packets(second)} == {2}
    assert not producer_packets(second)[0].previous_packet_dropped
    kinds = service_packet_kinds(second)
    assert "trace_config" not in kinds
    assert "system_info" not in kinds


def test_large_read_is_streamed_in_parts(env: ServiceEnv) -> None:
    producer, consumer = _start(env, simple_config(buffer_kb=2048))
    _write_numbered(producer, 0, 2000)
    consumer.stop()
    consumer.read()
    assert len(consumer.chunks) > 5
    trace = parse_upstream_trace(b"".join(consumer.chunks))
    assert _numbers(trace) == list(range(2000))


def test_reserved_fields_are_dropped_and_counted(env: ServiceEnv) -> None:
    producer, consumer = _start(env, simple_config())
    spoofed_uid = make_packet("spoof") + b"\x18\x00"  # trusted_uid = 0
    spoofed_seq = make_packet("spoof") + b"\x50\x01"  # trusted_packet_sequence_id = 1
    truncated = make_packet("ok")[:-1]
    producer.write(
        producer.instance(),
        make_packet("ok 1"),
        spoofed_uid,
        spoofed_seq,
        truncated,
        make_packet("ok 2"),
        flush=True,
    )
    consumer.stop()
    trace = consumer.read_trace()
    assert strings_of(trace) == ["ok 1", "ok 2"]
    stats = next(p.trace_stats for p in trace.packet if p.HasField("trace_stats"))
    assert stats.invalid_packets == 3


def _file_config(**fields: Any) -> TraceConfig:
    return simple_config(buffer_kb=1024, write_into_file=True, **fields)


def test_write_into_file_by_path(env: ServiceEnv, tmp_path: Path) -> None:
    path = tmp_path / "trace.pftrace"
    producer, consumer = _start(env, _file_config(output_path=str(path), file_write_period_ms=100))
    _write_numbered(producer, 0, 200)
    wait_for(lambda: path.stat().st_size > 200 * 180)  # drained while tracing
    _write_numbered(producer, 200, 200)
    # A write_into_file session cannot be read over IPC.
    assert consumer.read() == b""
    assert consumer.stop() == ""
    trace = parse_upstream_trace(path.read_bytes())
    assert _numbers(trace) == list(range(400))
    kinds = service_packet_kinds(trace)
    assert kinds[-1] == "trace_stats"
    assert kinds.count("trace_config") == 1
    assert oct(path.stat().st_mode & 0o777) == oct(0o644)


def test_write_into_file_by_fd(env: ServiceEnv, tmp_path: Path) -> None:
    path = tmp_path / "trace.fd"
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
    producer = FakeProducer(env).connect()
    producer.register("test.ds")
    consumer = FakeConsumer(env).connect()
    consumer.enable(_file_config(), output_fd=fd)
    env.settle()
    _write_numbered(producer, 0, 50)
    consumer.stop()
    assert _numbers(parse_upstream_trace(path.read_bytes())) == list(range(50))


def test_write_into_file_refuses_an_existing_path(env: ServiceEnv, tmp_path: Path) -> None:
    path = tmp_path / "exists"
    path.write_bytes(b"keep")
    consumer = FakeConsumer(env).connect()
    consumer.enable(_file_config(output_path=str(path)))
    assert "Failed to create the trace file" in consumer.wait_disabled()
    assert path.read_bytes() == b"keep"


def test_write_into_file_needs_exactly_one_destination(env: ServiceEnv, tmp_path: Path) -> None:
    consumer = FakeConsumer(env).connect()
    consumer.enable(_file_config())
    assert "either a FD needs to be passed or output_path" in consumer.wait_disabled()


def test_max_file_size_stops_the_session(env: ServiceEnv, tmp_path: Path) -> None:
    path = tmp_path / "capped"
    limit = 20_000
    producer, consumer = _start(
        env,
        _file_config(output_path=str(path), file_write_period_ms=100, max_file_size_bytes=limit),
    )
    _write_numbered(producer, 0, 400)
    assert consumer.wait_disabled() == ""  # the service stopped it: no duration, nobody else
    data = path.read_bytes()
    assert 0 < len(data) < limit
    numbers = _numbers(parse_upstream_trace(data))
    assert numbers == list(range(len(numbers)))


@pytest.mark.parametrize("to_file", [False, True])
def test_deflate_compression(env: ServiceEnv, tmp_path: Path, to_file: bool) -> None:
    path = tmp_path / "compressed"
    config = simple_config(buffer_kb=1024)
    config.compression.deflate.SetInParent()
    if to_file:
        config.write_into_file = True
        config.output_path = str(path)
    producer, consumer = _start(env, config)
    _write_numbered(producer, 0, 300)
    consumer.stop()
    data = path.read_bytes() if to_file else consumer.read()
    outer: Any = parse_upstream_trace(data)
    assert outer.packet
    assert all(p.HasField("compressed_packets") for p in outer.packet)
    inner = parse_upstream_trace(
        b"".join(zlib.decompress(p.compressed_packets) for p in outer.packet)
    )
    assert _numbers(inner) == list(range(300))
    assert service_packet_kinds(inner)[-1] == "trace_stats"


def test_read_stream_ends_when_the_session_is_freed_mid_read(env: ServiceEnv) -> None:
    producer, consumer = _start(env, simple_config(buffer_kb=1024))
    _write_numbered(producer, 0, 500)  # ~100 KB: several parts

    def read_then_free() -> None:
        consumer.endpoint.read_buffers()
        consumer.endpoint.free_buffers()

    env.call(read_then_free)
    wait_for(lambda: consumer.read_done)
    assert len(consumer.chunks) == 2
    assert consumer.chunks[-1] == b""
