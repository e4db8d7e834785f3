"""Hostile producers: bad CommitData, forged chunks, garbage SMB contents; SMB scraping.

The service must stay up, keep every other producer's data intact and count what it threw
away in TraceStats.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import time
from collections.abc import Iterator
from typing import Any

import pytest
from google.protobuf.message import DecodeError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from perfetto_protos.common.commit_data_request_pb2 import CommitDataRequest
from perfetto_protos.common.data_source_descriptor_pb2 import DataSourceDescriptor
from perfetto_protos.common.trace_stats_pb2 import TraceStats
from perfetto_protos.upstream import upstream_message_class
from perfetto_smb import MAX_WRITER_ID, PageLayout, SharedMemoryABI
from perfetto_smb._abi import pack_chunk_header
from perfetto_testing import wait_for
from protozero import read_varint
from tracing_service_harness import (
    FakeConsumer,
    FakeProducer,
    ServiceEnv,
    make_packet,
    simple_config,
    strings_of,
)

pytestmark = pytest.mark.timeout(120)

_TracePacket = upstream_message_class("perfetto.protos.TracePacket")


@pytest.fixture
def env() -> Iterator[ServiceEnv]:
    service_env = ServiceEnv(uid=os.getuid())
    yield service_env
    service_env.close()


class Scene:
    """A session with a good producer and a hostile one, plus a second session."""

    def __init__(self, env: ServiceEnv) -> None:
        self.env = env
        self.good = FakeProducer(env, name="good", pid=1).connect()
        self.hostile = FakeProducer(env, name="hostile", pid=2).connect(smb_scraping_mode=1)
        self.outsider = FakeProducer(env, name="outsider", pid=3).connect()
        for p in (self.good, self.hostile):
            p.register("test.ds")
        self.outsider.register("other.ds")
        self.consumer = FakeConsumer(env).connect()
        config = simple_config(buffer_kb=4096)
        config.data_sources[0].producer_name_filter.extend(["good", "hostile"])
        self.consumer.enable(config)
        self.other = FakeConsumer(env).connect()
        self.other.enable(simple_config(data_source="other.ds"))
        env.settle()
        self.buffer = self.good.instance().config.target_buffer
        self.other_buffer = self.outsider.instance().config.target_buffer
        self.good_strings: list[str] = []
        arbiter = self.hostile.arbiter
        assert arbiter is not None
        self.abi: SharedMemoryABI = arbiter.abi

    def write_good(self, count: int) -> None:
        start = len(self.good_strings)
        strings = [f"good {i}" for i in range(start, start + count)]
        self.good.write(self.good.instance(), *map(make_packet, strings), flush=True)
        self.good_strings.extend(strings)

    def forge_chunk(
        self, *, page: int, writer_id: int, chunk_id: int, payload: bytes, complete: bool = True
    ) -> None:
        """Puts a chunk into the hostile producer's SMB by hand."""
        abi = self.abi
        assert abi.try_partition_page(page, PageLayout.DIV1)
        chunk = abi.try_acquire_chunk_for_writing(
            page, 0, chunk_id=chunk_id, writer_id=writer_id, packet_count=1
        )
        assert chunk is not None
        abi.view[chunk.payload_begin : chunk.payload_begin + len(payload)] = payload
        if complete:
            abi.release_chunk_as_complete(chunk)

    def commit(self, request: CommitDataRequest) -> None:
        self.env.call(lambda: self.hostile.endpoint.commit_data(request))

    def stats(self) -> TraceStats:
        self.consumer.stats.clear()
        self.env.call(self.consumer.endpoint.get_trace_stats)
        wait_for(lambda: bool(self.consumer.stats))
        return self.consumer.stats[0][1]

    def finish(self) -> list[Any]:
        """Stops the session, reads it, and returns every packet that parses upstream."""
        self.write_good(3)
        self.consumer.stop()
        data = self.consumer.read()
        return list(_parse_packets(data))

    def check_others_intact(self) -> None:
        """The good producer's packets all arrive, the other session is undisturbed."""
        packets = self.finish()
        assert _good_strings(packets) == self.good_strings
        assert not self.other.disabled
        assert self.other.stop() == ""

    def close(self) -> None:
        """Disconnects every producer and consumer (their shared memory goes with them)."""
        for producer in (self.good, self.hostile, self.outsider):
            producer.disconnect()
        for consumer in (self.consumer, self.other):
            self.env.call(consumer.endpoint.disconnect)


@contextlib.contextmanager
def fresh_scene() -> Iterator[Scene]:
    """A Scene on a service of its own, so that every fuzzed example starts from scratch."""
    env = ServiceEnv(uid=os.getuid())
    try:
        scene = Scene(env)
        try:
            yield scene
        finally:
            scene.close()
    finally:
        env.close()


def _parse_packets(data: bytes) -> Iterator[Any]:
    """Splits a trace into its packets (failing on bad framing) and parses those that can be."""
    pos = 0
    while pos < len(data):
        assert data[pos] == 0x0A
        length, pos = read_varint(data, pos + 1, len(data))
        assert pos > 0
        packet = _TracePacket()
        body = data[pos : pos + length]
        pos += length
        try:
            packet.ParseFromString(body)
        except DecodeError:
            continue  # hostile payloads need not parse below the top level
        yield packet


def _good_strings(packets: list[Any]) -> list[str]:
    return [p.for_testing.str for p in packets if p.trusted_pid == 1 and p.HasField("for_testing")]


def test_commit_data_validation(env: ServiceEnv) -> None:
    scene = Scene(env)
    scene.write_good(5)
    writer = scene.good.instance().writer
    assert writer is not None
    good_writer = writer.writer_id
    payload = b"\x05\x00\x00\x00" + make_packet("x")[:5]

    request = CommitDataRequest()
    request.chunks_to_move.add(page=0, chunk=0, target_buffer=scene.buffer)  # free chunk
    request.chunks_to_move.add(page=10_000, chunk=0, target_buffer=scene.buffer)
    request.chunks_to_move.add(page=1, chunk=13, target_buffer=scene.buffer)
    scene.commit(request)
    assert scene.stats().chunks_discarded == 3

    scene.forge_chunk(page=1, writer_id=0, chunk_id=0, payload=payload)
    scene.forge_chunk(page=2, writer_id=5, chunk_id=0, payload=payload, complete=False)
    scene.forge_chunk(page=3, writer_id=5, chunk_id=0, payload=payload)
    scene.forge_chunk(page=4, writer_id=6, chunk_id=0, payload=payload)
    env.call(lambda: scene.hostile.endpoint.register_trace_writer(6, scene.buffer + 100))
    request = CommitDataRequest()
    request.chunks_to_move.add(page=1, chunk=0, target_buffer=scene.buffer)  # writer 0
    request.chunks_to_move.add(page=2, chunk=0, target_buffer=scene.buffer)  # being written
    request.chunks_to_move.add(page=3, chunk=0, target_buffer=scene.other_buffer)  # not ours
    request.chunks_to_move.add(page=4, chunk=0, target_buffer=scene.buffer)  # wrong for writer 6
    scene.commit(request)
    assert scene.stats().chunks_discarded == 7

    request = CommitDataRequest()
    for writer_id, target in ((0, scene.buffer), (40_000, scene.buffer), (1, 999)):
        patch = request.chunks_to_patch.add(writer_id=writer_id, chunk_id=0, target_buffer=target)
        patch.patches.add(offset=0, data=b"\xff\xff\xff\xff")
    # Patches aimed at the good producer's chunks land on the hostile producer's (none).
    aimed = request.chunks_to_patch.add(
        writer_id=good_writer, chunk_id=0, target_buffer=scene.buffer
    )
    aimed.patches.add(offset=0, data=b"\xff\xff\xff\xff")
    aimed.patches.add(offset=4, data=b"\xff\xff")  # not 4 bytes
    scene.commit(request)
    stats = scene.stats()
    assert stats.patches_discarded == 4
    assert stats.buffer_stats[0].patches_failed == 1

    packets = scene.finish()
    assert _good_strings(packets) == scene.good_strings
    assert not scene.other.disabled
    assert not [p for p in packets if p.trusted_pid == 2 and p.HasField("for_testing")]


_moves = st.lists(
    st.tuples(
        st.integers(0, 70),  # page (the SMB has 64)
        st.integers(0, 15),  # chunk
        st.sampled_from(["mine", "other", "random"]),
        st.none() | st.binary(max_size=300),  # emulation-mode chunk bytes
        st.booleans(),
    ),
    max_size=6,
)
_patches = st.lists(
    st.tuples(
        st.integers(0, 40_000),
        st.integers(0, 2**32 - 1),
        st.lists(st.tuples(st.integers(0, 5000), st.binary(max_size=6)), max_size=4),
        st.booleans(),
    ),
    max_size=3,
)
_scribbles = st.lists(
    st.tuples(st.integers(0, 256 * 1024 - 1), st.binary(min_size=1, max_size=64)), max_size=8
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    scribbles=_scribbles,
    moves=_moves,
    patches=_patches,
    flush_id=st.integers(0, 2**64 - 1),
    writer=st.integers(0, 40_000),
)
def test_fuzzed_commits_leave_others_intact(
    *,
    scribbles: list[tuple[int, bytes]],
    moves: list[tuple[int, int, str, bytes | None, bool]],
    patches: list[tuple[int, int, list[tuple[int, bytes]], bool]],
    flush_id: int,
    writer: int,
) -> None:
    with fresh_scene() as scene:
        _fuzz_commit(scene, scribbles, moves, patches, flush_id, writer)
        scene.check_others_intact()


def _fuzz_commit(  # noqa: PLR0917 - the drawn values, in order
    scene: Scene,
    scribbles: list[tuple[int, bytes]],
    moves: list[tuple[int, int, str, bytes | None, bool]],
    patches: list[tuple[int, int, list[tuple[int, bytes]], bool]],
    flush_id: int,
    writer: int,
) -> None:
    scene.write_good(1)
    view = scene.abi.view
    for offset, garbage in scribbles:
        end = min(offset + len(garbage), len(view))
        view[offset:end] = garbage[: end - offset]
    request = CommitDataRequest(flush_request_id=flush_id)
    for page, chunk, target, data, incomplete in moves:
        buffer = {"mine": scene.buffer, "other": scene.other_buffer}.get(target, page * 7)
        move = request.chunks_to_move.add(page=page, chunk=chunk, target_buffer=buffer)
        if data is not None:
            move.data = pack_chunk_header(chunk, writer, 3, page & 7) + data
            move.chunk_incomplete = incomplete
    for writer_id, chunk_id, patch_list, more in patches:
        entry = request.chunks_to_patch.add(
            writer_id=writer_id,
            chunk_id=chunk_id,
            target_buffer=scene.buffer,
            has_more_patches=more,
        )
        for offset, data in patch_list:
            entry.patches.add(offset=offset, data=data)
    scene.env.call(lambda: scene.hostile.endpoint.register_trace_writer(writer, scene.buffer))
    scene.commit(request)
    scene.write_good(1)


def test_scraping_recovers_uncommitted_packets(env: ServiceEnv) -> None:
    results = {}
    for mode, name in ((1, "scraped"), (2, "not scraped")):
        producer = FakeProducer(env, name=name, ack_stops=False).connect(smb_scraping_mode=mode)
        producer.register("test.ds")
        consumer = FakeConsumer(env).connect()
        config = simple_config()
        config.data_sources[0].producer_name_filter.append(name)
        consumer.enable(config)
        env.settle()
        inst = producer.instance()

        def write(p: FakeProducer = producer, i: Any = inst) -> None:
            assert i.writer is not None
            for n in range(3):
                i.writer.write_packet(make_packet(f"uncommitted {n}"))
            i.writer.finish_trace_packet()

        env.call(write)
        consumer.stop()
        results[mode] = strings_of(consumer.read_trace())
        env.call(consumer.endpoint.disconnect)
    assert results[1] == [f"uncommitted {n}" for n in range(3)]
    assert results[2] == []


_producer_calls = st.lists(
    st.one_of(
        st.tuples(
            st.just("register_data_source"),
            st.sampled_from(["", "test.ds", "x"]),
            st.integers(0, 3),
        ),
        st.tuples(
            st.just("update_data_source"), st.sampled_from(["", "test.ds", "x"]), st.integers(0, 3)
        ),
        st.tuples(st.just("unregister_data_source"), st.sampled_from(["", "test.ds", "x"])),
        st.tuples(
            st.just("register_trace_writer"), st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1)
        ),
        st.tuples(st.just("unregister_trace_writer"), st.integers(0, 2**32 - 1)),
        st.tuples(st.just("notify_flush_complete"), st.integers(0, 2**64 - 1)),
        st.tuples(st.just("notify_data_source_started"), st.integers(0, 2**64 - 1)),
        st.tuples(st.just("notify_data_source_stopped"), st.integers(0, 2**64 - 1)),
        st.tuples(st.just("activate_triggers"), st.lists(st.text(max_size=5), max_size=3)),
    ),
    max_size=10,
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(calls=_producer_calls)
def test_random_producer_calls(calls: list[tuple[Any, ...]]) -> None:
    with fresh_scene() as scene:
        scene.write_good(1)
        endpoint = scene.hostile.endpoint

        def run() -> None:
            for name, *args in calls:
                if name in {"register_data_source", "update_data_source"}:
                    descriptor = DataSourceDescriptor(name=args[0], id=args[1])
                    getattr(endpoint, name)(descriptor)
                else:
                    getattr(endpoint, name)(*args)

        scene.env.call(run)
        scene.env.settle()
        scene.write_good(1)
        scene.check_others_intact()


def test_register_trace_writer_outside_upstream_ids_is_refused_counted_and_logged_once(
    env: ServiceEnv, caplog: pytest.LogCaptureFixture
) -> None:
    producer = FakeProducer(env, name="flood").connect()
    endpoint = producer.endpoint
    bad = [0, MAX_WRITER_ID + 1, 0xFFFF, 0x10000, 2**32 - 1]

    def register() -> None:
        for writer_id in [*range(1, MAX_WRITER_ID + 1), *bad]:
            endpoint.register_trace_writer(writer_id, 1)

    with caplog.at_level(logging.WARNING, logger="perfetto_service"):
        env.call(register)
    assert len(endpoint.writers) == MAX_WRITER_ID
    assert endpoint.writers_refused == len(bad)
    refusals = [r.getMessage() for r in caplog.records if "RegisterTraceWriter" in r.getMessage()]
    assert refusals == [
        f'producer {endpoint.id} "flood": RegisterTraceWriter with writer id 0 refused '
        f"(valid: 1-{MAX_WRITER_ID}); further ones are counted, not logged"
    ]


def test_register_data_source_takes_as_long_for_the_20000th_as_for_the_first(
    env: ServiceEnv,
) -> None:
    """CPU time of the service's thread, so that load from elsewhere does not count."""
    producer = FakeProducer(env, name="many").connect()
    count, window = 20_000, 2_000
    descriptors = [DataSourceDescriptor(name=f"ds.{n}", id=n) for n in range(1, count + 1)]
    first, last, _ = _register_timed(env, producer, descriptors, window)
    assert last < 4 * first + 0.05, f"first {window}: {first:.3f} s, last {window}: {last:.3f} s"
    env.call(lambda: producer.endpoint.register_data_source(descriptors[0]))  # duplicate id
    state = env.call(lambda: env.service.service_state(0, sessions_only=False))
    assert len(state.data_sources) == count


def _register_timed(
    env: ServiceEnv, producer: FakeProducer, descriptors: list[DataSourceDescriptor], window: int
) -> tuple[float, float, float]:
    """CPU seconds of the service's thread registering the first `window` descriptors, the
    last `window`, and all of them (with the cyclic GC off: a collection that happens to fall
    in a window costs in proportion to every object alive, not to the service's work)."""

    def register() -> tuple[float, float, float]:
        spans = []
        parts = (descriptors[:window], descriptors[window:-window], descriptors[-window:])
        gc.collect()
        gc.disable()
        try:
            for part in parts:
                started = time.thread_time()
                for descriptor in part:
                    producer.endpoint.register_data_source(descriptor)
                spans.append(time.thread_time() - started)
        finally:
            gc.enable()
        return spans[0], spans[2], sum(spans)

    return env.call(register)


def test_a_producer_with_10000_data_sources_leaves_at_once(env: ServiceEnv) -> None:
    """Behind another producer's 10,000: leaving took 3.5 s of the service's thread."""
    count = 10_000
    for name in ("first", "second"):
        producer = FakeProducer(env, name=name).connect()
        descriptors = [DataSourceDescriptor(name=f"ds.{n}", id=n) for n in range(1, count + 1)]
        *_, registering = _register_timed(env, producer, descriptors, 100)

    def leave() -> float:
        gc.collect()
        gc.disable()
        try:
            started = time.thread_time()
            producer.endpoint.disconnect()
            return time.thread_time() - started
        finally:
            gc.enable()

    # Leaving undoes what registering did, so it may cost about as much (0.05 s each on a
    # loaded CI core); the quadratic leave this guards against cost 70 times as much.
    leaving = env.call(leave)
    assert leaving < 3 * registering, f"registering {registering:.3f} s, leaving {leaving:.3f} s"
    state = env.call(lambda: env.service.service_state(0, sessions_only=False))
    assert len(state.data_sources) == count


def test_register_data_source_into_a_started_session_takes_as_long_for_the_last(
    env: ServiceEnv,
) -> None:
    """Each registration checked every instance of the session for ALL_DATA_SOURCES_STARTED."""
    consumer = FakeConsumer(env).connect()
    consumer.enable(simple_config())
    env.settle()
    producer = FakeProducer(env, name="many").connect()
    count, window = 8_000, 800
    descriptors = [DataSourceDescriptor(name="test.ds", id=n) for n in range(1, count + 1)]
    first, last, _ = _register_timed(env, producer, descriptors, window)
    assert last < 4 * first + 0.05, f"first {window}: {first:.3f} s, last {window}: {last:.3f} s"
