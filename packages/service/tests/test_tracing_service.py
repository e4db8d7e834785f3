"""TracingService end to end, in process: real loop, real SMB, upstream's schema as oracle."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from perfetto_protos.common.commit_data_request_pb2 import CommitDataRequest
from perfetto_protos.common.data_source_descriptor_pb2 import DataSourceDescriptor
from perfetto_protos.common.tracing_service_state_pb2 import TracingServiceState
from perfetto_protos.config.trace_config_pb2 import TraceConfig
from perfetto_service import ServiceError
from perfetto_smb import SharedMemory
from perfetto_smb._abi import pack_chunk_header
from perfetto_testing import wait_for
from tracing_service_harness import (
    FakeConsumer,
    FakeProducer,
    Instance,
    ServiceEnv,
    make_packet,
    producer_packets,
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


def test_packets_reach_the_consumer_with_trusted_fields(env: ServiceEnv) -> None:
    producer = FakeProducer(env, uid=1234, pid=777).connect()
    producer.register("test.ds")
    consumer = FakeConsumer(env).connect()
    consumer.enable(simple_config())
    env.settle()
    inst = producer.instance()
    producer.write(inst, *(make_packet(f"event {i}", f8=1000 + i) for i in range(50)), flush=True)
    assert consumer.stop() == ""
    trace = consumer.read_trace()

    assert strings_of(trace) == [f"event {i}" for i in range(50)]
    packets = producer_packets(trace)
    assert {p.trusted_uid for p in packets} == {1234}
    assert {p.trusted_pid for p in packets} == {777}
    assert {p.trusted_packet_sequence_id for p in packets} == {2}
    assert [p.timestamp for p in packets] == [1000 + i for i in range(50)]
    # The first packet of the sequence is marked as following a (possible) loss, like upstream.
    assert packets[0].previous_packet_dropped
    assert not any(p.previous_packet_dropped for p in packets[1:])
    assert packets[0].first_packet_on_sequence


def test_commands_come_in_order_with_the_config_rewritten(env: ServiceEnv) -> None:
    producer = FakeProducer(env).connect()
    producer.register("test.ds")
    consumer = FakeConsumer(env).connect()
    config = simple_config(duration_ms=60_000, data_source_stop_timeout_ms=1234)
    config.buffers.add(size_kb=64)
    ds_config = config.data_sources[0].config
    ds_config.target_buffer = 1
    ds_config.tracing_session_id = 999
    ds_config.for_testing.message_count = 7
    # A sub-config this package does not model (ftrace_config = 100) must pass unchanged.
    ds_config.MergeFromString(b"\xa2\x06\x05\x0a\x03abc")
    consumer.enable(config)
    env.settle()

    assert producer.commands[:4] == ["connect", "setup_tracing", "setup:1", "start:1"]
    got = producer.instance().config
    assert got.name == "test.ds"
    assert got.target_buffer == 2  # the second buffer's global id
    assert got.tracing_session_id == 1
    assert got.trace_duration_ms == 60_000
    assert got.stop_timeout_ms == 1234
    assert got.for_testing.message_count == 7
    assert b"\xa2\x06\x05\x0a\x03abc" in got.SerializeToString()


def test_service_packets_in_upstream_order(env: ServiceEnv) -> None:
    producer = FakeProducer(env).connect()
    producer.register("test.ds")
    consumer = FakeConsumer(env).connect()
    consumer.enable(simple_config())
    env.settle()
    producer.write(producer.instance(), make_packet("x"), flush=True)
    consumer.stop()
    trace = consumer.read_trace()

    kinds = service_packet_kinds(trace)
    assert kinds[:7] == [
        "clock_snapshot",  # the initial snapshot
        "clock_snapshot",  # the first periodic tick's
        "synchronization_marker",
        "trace_config",
        "trace_uuid",
        "trace_provenance",
        "system_info",
    ]
    events = [k for k in kinds if k.startswith("service_event")]
    assert events[0] == "service_event:tracing_started"
    assert "service_event:all_data_sources_started" in events
    assert "service_event:tracing_disabled" in events
    assert kinds[-2:] == ["service_event:read_tracing_buffers_completed", "trace_stats"]
    # Service packets come before the producer's, the stats last.
    first_producer = next(i for i, p in enumerate(trace.packet) if p.trusted_packet_sequence_id > 1)
    assert all(p.trusted_packet_sequence_id == 1 for p in trace.packet[:first_producer])
    service = [p for p in trace.packet if p.trusted_packet_sequence_id == 1]
    assert {p.trusted_uid for p in service} == {os.getuid()}
    assert trace.packet[3].trace_config.buffers[0].size_kb == 256
    timestamps = [p.timestamp for p in service if p.HasField("service_event")]
    assert timestamps == sorted(timestamps)


def test_two_producers_two_sessions(env: ServiceEnv) -> None:
    a = FakeProducer(env, name="prod.a", pid=1).connect()
    b = FakeProducer(env, name="prod.b", pid=2).connect()
    a.register("ds.a")
    b.register("ds.b")
    b.register("ds.a")
    c1 = FakeConsumer(env).connect()
    c2 = FakeConsumer(env, uid=2000).connect()
    c1.enable(simple_config(data_source="ds.a"))
    c2.enable(simple_config(data_source="ds.b"))
    env.settle()
    assert len(a.instances) == 1
    assert len(b.instances) == 2
    a_inst = a.instance()
    b_for_1 = next(i for i in b.instances.values() if i.config.name == "ds.a")
    b_for_2 = next(i for i in b.instances.values() if i.config.name == "ds.b")
    a.write(a_inst, make_packet("a1"), flush=True)
    b.write(b_for_1, make_packet("b1"), flush=True)
    b.write(b_for_2, make_packet("b2"), flush=True)
    c1.stop()
    c2.stop()
    t1 = c1.read_trace()
    t2 = c2.read_trace()

    assert sorted(strings_of(t1)) == ["a1", "b1"]
    assert strings_of(t2) == ["b2"]
    pids = {p.for_testing.str: p.trusted_pid for p in producer_packets(t1)}
    assert pids == {"a1": 1, "b1": 2}


def test_producer_name_filters(env: ServiceEnv) -> None:
    producers = [FakeProducer(env, name=n).connect() for n in ("com.app.one", "com.app.two", "x")]
    for p in producers:
        p.register("test.ds")
    config = simple_config()
    config.data_sources[0].producer_name_filter.append("x")
    config.data_sources[0].producer_name_regex_filter.append(r"com\.app\.t.*")
    consumer = FakeConsumer(env).connect()
    consumer.enable(config)
    env.settle()
    assert [len(p.instances) for p in producers] == [0, 1, 1]


def test_data_source_registered_after_start_joins(env: ServiceEnv) -> None:
    consumer = FakeConsumer(env).connect()
    consumer.enable(simple_config())
    producer = FakeProducer(env).connect()
    producer.register("test.ds")
    env.settle()
    assert producer.commands[1:4] == ["setup_tracing", "setup:1", "start:1"]


def test_unknown_data_source_and_producer_disconnect_mid_session(env: ServiceEnv) -> None:
    stay = FakeProducer(env, name="stay").connect()
    leave = FakeProducer(env, name="leave").connect()
    stay.register("test.ds")
    leave.register("test.ds")
    consumer = FakeConsumer(env).connect()
    consumer.enable(simple_config())
    env.settle()
    leave.write(leave.instance(), make_packet("leave 1"), make_packet("leave 2"), flush=True)
    leave.disconnect()
    stay.write(stay.instance(), make_packet("stay 1"), flush=True)
    assert consumer.stop() == ""
    trace = consumer.read_trace()
    assert sorted(strings_of(trace)) == ["leave 1", "leave 2", "stay 1"]
    stats = next(p.trace_stats for p in trace.packet if p.HasField("trace_stats"))
    assert stats.producers_connected == 1
    assert stats.producers_seen == 2


def test_consumer_disconnect_frees_the_session(env: ServiceEnv) -> None:
    producer = FakeProducer(env).connect()
    producer.register("test.ds")
    consumer = FakeConsumer(env).connect()
    consumer.enable(simple_config())
    env.settle()
    env.call(consumer.endpoint.disconnect)
    env.settle()
    assert producer.instance().stopped
    assert env.call(lambda: env.service.session(1)) is None
    assert env.call(lambda: env.service.buffer(1)) is None


def test_enable_errors_are_reported(env: ServiceEnv) -> None:
    consumer = FakeConsumer(env).connect()
    bad = simple_config()
    bad.data_sources[0].config.target_buffer = 3
    consumer.enable(bad)
    assert "out of bounds target_buffer" in consumer.wait_disabled()

    consumer.disabled.clear()
    consumer.enable(simple_config(duration_ms=1000, trigger_config={"trigger_mode": 2}))
    assert "trigger_timeout_ms" in consumer.wait_disabled()

    consumer.disabled.clear()
    consumer.enable(TraceConfig(buffers=[TraceConfig.BufferConfig(size_kb=0)]))
    assert "Invalid buffer sizes" in consumer.wait_disabled()


def test_unique_session_name(env: ServiceEnv) -> None:
    first = FakeConsumer(env).connect()
    second = FakeConsumer(env).connect()
    first.enable(simple_config(unique_session_name="snap"))
    second.enable(simple_config(unique_session_name="snap"))
    assert "unique session name (snap) already exists" in second.wait_disabled()
    assert not first.disabled


def test_smb_sizes_follow_config_then_hints(env: ServiceEnv) -> None:
    configured = FakeProducer(env, name="configured").connect(
        shm_size_hint_bytes=1 << 20, shm_page_size_hint_bytes=16384
    )
    hinted = FakeProducer(env, name="hinted").connect(
        shm_size_hint_bytes=1 << 20, shm_page_size_hint_bytes=16384
    )
    bad = FakeProducer(env, name="bad").connect(
        shm_size_hint_bytes=12345, shm_page_size_hint_bytes=3000
    )
    for p in (configured, hinted, bad):
        p.register("test.ds")
    config = simple_config()
    config.producers.add(producer_name="configured", shm_size_kb=512, page_size_kb=8)
    consumer = FakeConsumer(env).connect()
    consumer.enable(config)
    env.settle()

    def sizes(p: FakeProducer) -> tuple[int, int]:
        shm = p.endpoint.shared_memory()
        assert shm is not None
        return shm.size, p.endpoint.shared_buffer_page_size_kb()

    assert sizes(configured) == (512 * 1024, 8)
    assert sizes(hinted) == (1 << 20, 16)
    assert sizes(bad) == (256 * 1024, 4)


def test_producer_provided_smb(env: ServiceEnv) -> None:
    shm = SharedMemory.create(128 * 1024)
    producer = FakeProducer(env).connect(shm=shm, shm_page_size_hint_bytes=8192)
    assert producer.endpoint.is_shmem_provided_by_producer()
    env.settle()
    assert producer.commands == ["connect", "setup_tracing"]
    producer.register("test.ds")
    consumer = FakeConsumer(env).connect()
    consumer.enable(simple_config())
    env.settle()
    assert producer.endpoint.shared_memory() is shm
    producer.write(producer.instance(), make_packet("own smb"), flush=True)
    consumer.stop()
    assert strings_of(consumer.read_trace()) == ["own smb"]


def test_producer_provided_smb_of_bad_size_is_replaced(env: ServiceEnv) -> None:
    shm = SharedMemory.create(100 * 1024)
    producer = FakeProducer(env).connect(shm=shm, shm_page_size_hint_bytes=8192)
    assert not producer.endpoint.is_shmem_provided_by_producer()
    assert shm.closed
    assert producer.endpoint.shared_memory() is None


def test_lockdown_refuses_other_uids(env: ServiceEnv) -> None:
    consumer = FakeConsumer(env).connect()
    consumer.enable(simple_config(lockdown_mode=TraceConfig.LOCKDOWN_SET))
    with pytest.raises(ServiceError, match="lockdown"):
        FakeProducer(env, uid=os.getuid() + 1).connect()
    FakeProducer(env, uid=os.getuid()).connect()


def test_start_callback_writes_are_read(env: ServiceEnv) -> None:
    def on_start(producer: FakeProducer, inst: Instance) -> None:
        assert inst.writer is not None
        inst.writer.write_packet(make_packet("at start"))
        inst.writer.flush()

    producer = FakeProducer(env, on_start=on_start).connect()
    producer.register("test.ds")
    consumer = FakeConsumer(env).connect()
    consumer.enable(simple_config())
    env.settle()
    consumer.stop()
    assert strings_of(consumer.read_trace()) == ["at start"]


def test_unregister_stops_running_instances(env: ServiceEnv) -> None:
    producer = FakeProducer(env).connect()
    producer.register("test.ds")
    consumer = FakeConsumer(env).connect()
    consumer.enable(simple_config())
    env.settle()
    producer.write(producer.instance(), make_packet("before unregister"), flush=True)
    env.call(lambda: producer.endpoint.unregister_data_source("test.ds"))
    env.settle()
    assert producer.commands[-1] == "stop:1"
    session = env.call(lambda: env.service.session(1))
    assert session is not None
    assert session.data_source_instances == []
    consumer.stop()
    assert strings_of(consumer.read_trace()) == ["before unregister"]


def test_update_data_source_keeps_name_and_id(env: ServiceEnv) -> None:
    producer = FakeProducer(env).connect()
    producer.register("test.ds", id=7)
    updated = DataSourceDescriptor(name="test.ds", id=7, will_notify_on_stop=True)
    env.call(lambda: producer.endpoint.update_data_source(updated))
    consumer = FakeConsumer(env).connect()
    states: list[tuple[bool, TracingServiceState]] = []
    env.call(
        lambda: consumer.endpoint.query_service_state(False, lambda ok, s: states.append((ok, s)))
    )
    descriptors = [d.ds_descriptor for d in states[0][1].data_sources]
    assert [(d.name, d.id, d.will_notify_on_stop) for d in descriptors] == [("test.ds", 7, True)]


def test_commits_with_chunk_bytes_in_the_request(env: ServiceEnv) -> None:
    producer = FakeProducer(env).connect()
    producer.register("test.ds")
    consumer = FakeConsumer(env).connect()
    consumer.enable(simple_config())
    env.settle()
    target = producer.instance().config.target_buffer
    request = CommitDataRequest()
    for chunk_id, text in enumerate(("emulated 0", "emulated 1")):
        body = make_packet(text)
        fragment = bytes((len(body) | 0x80, 0x80, 0x80, 0x00)) + body
        move = request.chunks_to_move.add(page=0, chunk=0, target_buffer=target)
        move.data = pack_chunk_header(chunk_id, 3, 1, 0) + fragment
    # The last chunk is still being written: its only packet may be unfinished.
    move.chunk_incomplete = True
    env.call(lambda: producer.endpoint.commit_data(request))
    consumer.stop()
    assert strings_of(consumer.read_trace()) == ["emulated 0"]


def test_twenty_producers(env: ServiceEnv) -> None:
    producers = [FakeProducer(env, name=f"p{i}", pid=100 + i).connect() for i in range(20)]
    for p in producers:
        p.register("test.ds")
    consumer = FakeConsumer(env).connect()
    consumer.enable(simple_config(buffer_kb=1024))
    env.settle()
    for i, p in enumerate(producers):
        p.write(p.instance(), *(make_packet(f"p{i} e{j}") for j in range(10)), flush=True)
    consumer.stop()
    trace = consumer.read_trace()
    by_pid: dict[int, list[str]] = {}
    for packet in producer_packets(trace):
        by_pid.setdefault(packet.trusted_pid, []).append(packet.for_testing.str)
    assert by_pid == {100 + i: [f"p{i} e{j}" for j in range(10)] for i in range(20)}
    sequence_ids = {p.trusted_packet_sequence_id for p in producer_packets(trace)}
    assert sequence_ids == set(range(2, 22))


def test_periodic_snapshots_flag_sync_markers_and_stats(env: ServiceEnv) -> None:
    config = simple_config()
    # 3 s: the second and third reads below come well within one period on a loaded machine.
    config.builtin_data_sources.snapshot_interval_ms = 3000
    producer = FakeProducer(env).connect()
    producer.register("test.ds")
    consumer = FakeConsumer(env).connect()
    consumer.enable(config)
    env.settle()
    first = service_packet_kinds(consumer.read_trace())

    def ticked() -> bool:
        session = env.service.session(consumer.endpoint.tracing_session_id)
        return session is not None and session.should_emit_sync_marker

    wait_for(lambda: env.call(ticked))  # the next periodic tick, however late it runs
    second = service_packet_kinds(consumer.read_trace())
    third = service_packet_kinds(consumer.read_trace())
    assert first.count("synchronization_marker") == 1
    assert first[-1] == "trace_stats"
    assert second.count("synchronization_marker") == 1
    assert second[-1] == "trace_stats"
    # Nothing ticked since the last read: no marker, no stats.
    assert "synchronization_marker" not in third
    assert "trace_stats" not in third
