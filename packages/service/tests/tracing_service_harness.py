"""In-process producers and consumers driving a real TracingService on a real asyncio loop.

The loop runs in a background thread (as the service's does in traced); the test thread
hands work to it with `ServiceEnv.call`. Producers write with `perfetto_smb`'s arbiter and
TraceWriter straight into the SMB the service created, on the loop thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from perfetto_protos.common.commit_data_request_pb2 import CommitDataRequest
from perfetto_protos.common.data_source_descriptor_pb2 import DataSourceDescriptor
from perfetto_protos.common.observable_events_pb2 import ObservableEvents
from perfetto_protos.common.trace_stats_pb2 import TraceStats
from perfetto_protos.config.data_source_config_pb2 import DataSourceConfig
from perfetto_protos.config.trace_config_pb2 import TraceConfig
from perfetto_protos.upstream import parse_upstream_trace
from perfetto_service import (
    AsyncioTaskRunner,
    ClientIdentity,
    TracePacketSlices,
    TracingService,
    trace_file_bytes,
)
from perfetto_service.core._consumer_endpoint import ConsumerEndpointImpl
from perfetto_service.core._producer_endpoint import ProducerEndpointImpl
from perfetto_smb import SharedMemoryArbiter, TraceWriter
from perfetto_testing import TIMEOUT, wait_for
from protozero import encode_varint

T = TypeVar("T")


class ServiceEnv:
    """A TracingService whose task runner is an asyncio loop on a background thread."""

    def __init__(self, **service_kwargs: Any) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.task_runner = AsyncioTaskRunner(self.loop)
        self.service: TracingService = self.call(
            lambda: TracingService(self.task_runner, **service_kwargs)
        )

    def call(self, fn: Callable[[], T], timeout: float = TIMEOUT) -> T:
        """Runs `fn` on the loop thread and returns its result (or raises its exception)."""
        future: concurrent.futures.Future[T] = concurrent.futures.Future()

        def run() -> None:
            try:
                future.set_result(fn())
            except BaseException as e:
                future.set_exception(e)

        self.loop.call_soon_threadsafe(run)
        return future.result(timeout)

    def settle(self, rounds: int = 3) -> None:
        """Lets every task posted so far (and the tasks they post) run."""
        for _ in range(rounds):
            self.call(lambda: None)

    def close(self) -> None:
        """Stops the loop and its thread."""
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(TIMEOUT)
        self.loop.close()


def make_packet(text: str, **fields: int) -> bytes:
    """An encoded TracePacket body: for_testing.str = `text` (plus varint fields by number)."""
    payload = text.encode()
    body = b"\x0a" + encode_varint(len(payload)) + payload
    out = bytearray(encode_varint((900 << 3) | 2) + encode_varint(len(body)) + body)
    for number, value in ((int(k[1:]), v) for k, v in fields.items()):
        out += encode_varint(number << 3) + encode_varint(value)
    return bytes(out)


@dataclass
class Instance:
    """A data source instance as the test producer saw it."""

    instance_id: int
    config: DataSourceConfig
    started: bool = False
    stopped: bool = False
    writer: TraceWriter | None = None


@dataclass
class FakeProducer:
    """A producer living on the service's loop, writing through a real SMB."""

    env: ServiceEnv
    name: str = "test.producer"
    uid: int = 1000
    pid: int = 4242
    ack_flushes: bool = True
    ack_stops: bool = True
    on_start: Callable[[FakeProducer, Instance], None] | None = None
    endpoint: ProducerEndpointImpl = field(init=False)
    arbiter: SharedMemoryArbiter | None = None
    commands: list[str] = field(default_factory=list)
    instances: dict[int, Instance] = field(default_factory=dict)
    disconnected: bool = False

    def connect(self, **kwargs: Any) -> FakeProducer:
        """Connects to the service (keyword arguments go to connect_producer)."""
        identity = ClientIdentity(self.uid, self.pid)

        def run() -> None:
            self.endpoint = self.env.service.connect_producer(self, identity, self.name, **kwargs)

        self.env.call(run)
        return self

    def register(self, name: str = "test.ds", **descriptor: Any) -> None:
        """Registers a data source."""
        desc = DataSourceDescriptor(name=name, **descriptor)
        self.env.call(lambda: self.endpoint.register_data_source(desc))

    def disconnect(self) -> None:
        """Leaves the service, closing the producer's side of the SMB first."""

        def run() -> None:
            for inst in self.instances.values():
                if inst.writer is not None:
                    inst.writer = None
            if self.arbiter is not None:
                self.arbiter.close()
                self.arbiter = None
            self.endpoint.disconnect()

        self.env.call(run)

    def write(self, instance: Instance, *packets: bytes, flush: bool = False) -> None:
        """Writes packets with the instance's writer (on the loop thread)."""

        def run() -> None:
            assert instance.writer is not None
            for packet in packets:
                instance.writer.write_packet(packet)
            if flush:
                instance.writer.flush()

        self.env.call(run)

    def instance(self, index: int = 0) -> Instance:
        """The index-th instance this producer was asked to set up."""
        return list(self.instances.values())[index]

    def _commit(self, request: CommitDataRequest, callback: Callable[[], None] | None) -> None:
        self.endpoint.commit_data(request, callback)

    # Producer -----------------------------------------------------------------------------

    def on_connect(self) -> None:
        self.commands.append("connect")

    def on_disconnect(self) -> None:
        self.disconnected = True

    def on_tracing_setup(self) -> None:
        self.commands.append("setup_tracing")
        shm = self.endpoint.shared_memory()
        assert shm is not None
        self.arbiter = SharedMemoryArbiter(
            shm.buffer,
            self.endpoint.shared_buffer_page_size_kb() * 1024,
            self._commit,
            register_writer=self.endpoint.register_trace_writer,
            unregister_writer=self.endpoint.unregister_trace_writer,
        )

    def setup_data_source(self, instance_id: int, config: DataSourceConfig) -> None:
        self.commands.append(f"setup:{instance_id}")
        self.instances[instance_id] = Instance(instance_id, config)

    def start_data_source(self, instance_id: int, config: DataSourceConfig) -> None:
        self.commands.append(f"start:{instance_id}")
        inst = self.instances.setdefault(instance_id, Instance(instance_id, config))
        inst.started = True
        assert self.arbiter is not None
        inst.writer = self.arbiter.create_trace_writer(config.target_buffer)
        if self.on_start is not None:
            self.on_start(self, inst)

    def stop_data_source(self, instance_id: int) -> None:
        self.commands.append(f"stop:{instance_id}")
        inst = self.instances[instance_id]
        inst.stopped = True
        if not self.ack_stops:
            return
        if inst.writer is not None:
            inst.writer.flush()
        self.endpoint.notify_data_source_stopped(instance_id)

    def flush(self, request_id: int, instance_ids: Sequence[int], flags: int) -> None:
        self.commands.append(f"flush:{request_id}")
        if not self.ack_flushes:
            return
        for instance_id in instance_ids:
            writer = self.instances[instance_id].writer
            if writer is not None:
                writer.flush()
        assert self.arbiter is not None
        self.arbiter.notify_flush_complete(request_id)

    def clear_incremental_state(self, instance_ids: Sequence[int]) -> None:
        self.commands.append(f"clear:{','.join(map(str, instance_ids))}")


@dataclass
class FakeConsumer:
    """A consumer living on the service's loop; gathers what the service sends it."""

    env: ServiceEnv
    uid: int = 1000
    endpoint: ConsumerEndpointImpl = field(init=False)
    disabled: list[str] = field(default_factory=list)
    chunks: list[bytes] = field(default_factory=list)
    read_done: bool = False
    detached: list[bool] = field(default_factory=list)
    attached: list[tuple[bool, TraceConfig]] = field(default_factory=list)
    stats: list[tuple[bool, TraceStats]] = field(default_factory=list)
    events: list[ObservableEvents] = field(default_factory=list)
    connected: bool = False

    def connect(self) -> FakeConsumer:
        """Connects to the service."""

        def run() -> None:
            self.endpoint = self.env.service.connect_consumer(self, self.uid)

        self.env.call(run)
        return self

    def enable(self, config: TraceConfig, output_fd: int | None = None) -> None:
        """EnableTracing."""
        self.env.call(lambda: self.endpoint.enable_tracing(config, output_fd))

    def wait_disabled(self, timeout: float = TIMEOUT) -> str:
        """Waits for the end of the session; returns its error."""
        wait_for(lambda: bool(self.disabled), timeout)
        return self.disabled[-1]

    def stop(self) -> str:
        """DisableTracing, then waits for the end."""
        self.env.call(self.endpoint.disable_tracing)
        return self.wait_disabled()

    def flush(self, timeout_ms: int = 5000) -> bool:
        """Flush; returns its outcome."""
        results: list[bool] = []
        self.env.call(lambda: self.endpoint.flush(timeout_ms, results.append))
        wait_for(lambda: bool(results), timeout_ms / 1000 + TIMEOUT)
        return results[0]

    def read(self) -> bytes:
        """ReadBuffers until has_more is false; returns the data as a trace file."""
        self.chunks.clear()
        self.read_done = False
        self.env.call(self.endpoint.read_buffers)
        wait_for(lambda: self.read_done)
        return b"".join(self.chunks)

    def read_trace(self) -> Any:
        """ReadBuffers, parsed with upstream's schema."""
        return parse_upstream_trace(self.read())

    # Consumer -----------------------------------------------------------------------------

    def on_connect(self) -> None:
        self.connected = True

    def on_disconnect(self) -> None:
        self.connected = False

    def on_tracing_disabled(self, error: str) -> None:
        self.disabled.append(error)

    def on_trace_data(self, packets: Sequence[TracePacketSlices], has_more: bool) -> None:
        self.chunks.append(trace_file_bytes(packets))
        if not has_more:
            self.read_done = True

    def on_detach(self, success: bool) -> None:
        self.detached.append(success)

    def on_attach(self, success: bool, config: TraceConfig) -> None:
        self.attached.append((success, config))

    def on_trace_stats(self, success: bool, stats: TraceStats) -> None:
        self.stats.append((success, stats))

    def on_observable_events(self, events: ObservableEvents) -> None:
        self.events.append(events)


def simple_config(
    *,
    buffer_kb: int = 256,
    fill_policy: int = TraceConfig.BufferConfig.RING_BUFFER,
    data_source: str = "test.ds",
    **fields: Any,
) -> TraceConfig:
    """One buffer and one data source."""
    config = TraceConfig(**fields)
    config.buffers.add(size_kb=buffer_kb, fill_policy=fill_policy)
    config.data_sources.add().config.name = data_source
    return config


def producer_packets(trace: Any) -> list[Any]:
    """The packets of `trace` written by producers (sequence id > 1)."""
    return [p for p in trace.packet if p.trusted_packet_sequence_id > 1]


def strings_of(trace: Any) -> list[str]:
    """for_testing.str of every producer packet, in order."""
    return [p.for_testing.str for p in producer_packets(trace) if p.HasField("for_testing")]


def service_packet_kinds(trace: Any) -> list[str]:
    """What each service packet (sequence id 1) carries, in order."""
    kinds = []
    for packet in trace.packet:
        if packet.trusted_packet_sequence_id != 1:
            continue
        kind = packet.WhichOneof("data") or "?"
        if kind == "service_event":
            kind += ":" + (packet.service_event.WhichOneof("event_type") or "?")
        kinds.append(kind)
    return kinds
