"""A scripted tracing service behind a real ServiceIPCHost, and recording producer/consumer."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from perfetto_protos.common.commit_data_request_pb2 import CommitDataRequest
from perfetto_protos.common.data_source_descriptor_pb2 import DataSourceDescriptor
from perfetto_protos.common.observable_events_pb2 import ObservableEvents
from perfetto_protos.common.trace_stats_pb2 import TraceStats
from perfetto_protos.common.tracing_service_capabilities_pb2 import TracingServiceCapabilities
from perfetto_protos.common.tracing_service_state_pb2 import TracingServiceState
from perfetto_protos.config.data_source_config_pb2 import DataSourceConfig
from perfetto_protos.config.trace_config_pb2 import TraceConfig
from perfetto_service import (
    ClientIdentity,
    Consumer,
    Producer,
    ServiceIPCHost,
    SessionCloned,
    TracePacketSlices,
)
from perfetto_service.core._relay_clients import RelayClients, RelayEndpoint
from perfetto_smb import SharedMemory

T = TypeVar("T")


class FakeProducerEndpoint:
    """Records every call a producer port makes."""

    def __init__(self, producer: Producer, identity: ClientIdentity, kwargs: dict[str, Any]):
        self.producer = producer
        self.identity = identity
        self.kwargs = kwargs
        self.calls: list[tuple[str, Any]] = []
        self.shm: SharedMemory | None = kwargs.get("shm") if kwargs.get("adopt") else None

    def _record(self, name: str, value: Any = None) -> None:
        self.calls.append((name, value))

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]

    def values(self, name: str) -> list[Any]:
        return [value for call, value in self.calls if call == name]

    def disconnect(self) -> None:
        self._record("disconnect")

    def register_data_source(self, descriptor: DataSourceDescriptor) -> None:
        self._record("register_data_source", descriptor.name)

    def update_data_source(self, descriptor: DataSourceDescriptor) -> None:
        self._record("update_data_source", descriptor.name)

    def unregister_data_source(self, name: str) -> None:
        self._record("unregister_data_source", name)

    def register_trace_writer(self, writer_id: int, target_buffer: int) -> None:
        self._record("register_trace_writer", (writer_id, target_buffer))

    def unregister_trace_writer(self, writer_id: int) -> None:
        self._record("unregister_trace_writer", writer_id)

    def commit_data(
        self, request: CommitDataRequest, callback: Callable[[], None] | None = None
    ) -> None:
        copy = CommitDataRequest()
        copy.CopyFrom(request)
        self._record("commit_data", copy)
        if callback is not None:
            callback()

    def commit_data_bytes(
        self, request: bytes | bytearray | memoryview, callback: Callable[[], None] | None = None
    ) -> None:
        self.commit_data(CommitDataRequest.FromString(bytes(request)), callback)

    def shared_memory(self) -> SharedMemory | None:
        return self.shm

    def shared_buffer_page_size_kb(self) -> int:
        return 4

    def notify_flush_complete(self, request_id: int) -> None:
        self._record("notify_flush_complete", request_id)

    def notify_data_source_started(self, instance_id: int) -> None:
        self._record("notify_data_source_started", instance_id)

    def notify_data_source_stopped(self, instance_id: int) -> None:
        self._record("notify_data_source_stopped", instance_id)

    def activate_triggers(self, names: Sequence[str]) -> None:
        self._record("activate_triggers", list(names))

    def sync(self, callback: Callable[[], None]) -> None:
        self._record("sync")
        callback()


class FakeConsumerEndpoint:
    """Answers a consumer port's calls from a script the test sets up."""

    def __init__(self, consumer: Consumer, uid: int) -> None:
        self.consumer = consumer
        self.uid = uid
        self.calls: list[tuple[str, Any]] = []
        self.packets: list[list[bytes]] = []
        self.parts = 2
        self.state = TracingServiceState()
        self.config = TraceConfig()

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]

    def disconnect(self) -> None:
        self.calls.append(("disconnect", None))

    def enable_tracing(self, config: TraceConfig, output_fd: int | None = None) -> None:
        self.config = config
        self.calls.append(("enable_tracing", output_fd))

    def change_trace_config(self, config: TraceConfig) -> None:
        self.calls.append(("change_trace_config", config))

    def start_tracing(self) -> None:
        self.calls.append(("start_tracing", None))

    def disable_tracing(self) -> None:
        self.calls.append(("disable_tracing", None))
        self.consumer.on_tracing_disabled("stopped by the test")

    def flush(self, timeout_ms: int, callback: Callable[[bool], None], flags: int = 0) -> None:
        self.calls.append(("flush", (timeout_ms, flags)))
        callback(timeout_ms != 1)

    def read_buffers(self) -> None:
        """Delivers `packets` in `parts` parts, like the service's read tasks."""
        self.calls.append(("read_buffers", None))
        step = -(-len(self.packets) // self.parts) if self.packets else 1
        for start in range(0, len(self.packets), step):
            more = start + step < len(self.packets)
            self.consumer.on_trace_data(self.packets[start : start + step], more)
        if not self.packets:
            self.consumer.on_trace_data([], False)

    def free_buffers(self) -> None:
        self.calls.append(("free_buffers", None))

    def detach(self, key: str) -> None:
        self.calls.append(("detach", key))
        self.consumer.on_detach(key == "good")

    def attach(self, key: str) -> None:
        self.calls.append(("attach", key))
        self.consumer.on_attach(key == "good", self.config)

    def get_trace_stats(self) -> None:
        self.calls.append(("get_trace_stats", None))
        self.consumer.on_trace_stats(True, TraceStats(producers_connected=7))

    def observe_events(self, events_mask: int) -> None:
        self.calls.append(("observe_events", events_mask))

    def query_service_state(
        self, sessions_only: bool, callback: Callable[[bool, TracingServiceState], None]
    ) -> None:
        self.calls.append(("query_service_state", sessions_only))
        callback(True, self.state)

    def query_capabilities(self, callback: Callable[[TracingServiceCapabilities], None]) -> None:
        callback(TracingServiceCapabilities(has_query_capabilities=True))

    def clone_session(
        self,
        callback: Callable[[SessionCloned], None],
        *,
        session_id: int = 0,
        unique_session_name: str = "",
    ) -> None:
        self.calls.append(("clone_session", session_id or unique_session_name))
        callback(SessionCloned(False, "Tracing session not found"))


class FakeService:
    """Connects producers and consumers to recording endpoints."""

    def __init__(self, adopt_producer_shm: bool = False) -> None:
        self.producers: list[FakeProducerEndpoint] = []
        self.consumers: list[FakeConsumerEndpoint] = []
        self.adopt_producer_shm = adopt_producer_shm
        self.relays = RelayClients(uid=0)

    def connect_producer(
        self,
        producer: Producer,
        identity: ClientIdentity,
        name: str,
        *,
        shm_size_hint_bytes: int = 0,
        in_process: bool = False,
        smb_scraping_mode: int = 0,
        shm_page_size_hint_bytes: int = 0,
        shm: SharedMemory | None = None,
        sdk_version: str = "",
    ) -> FakeProducerEndpoint | None:
        if name == "refused":
            return None
        kwargs = {
            "name": name,
            "shm_size_hint_bytes": shm_size_hint_bytes,
            "in_process": in_process,
            "smb_scraping_mode": smb_scraping_mode,
            "shm_page_size_hint_bytes": shm_page_size_hint_bytes,
            "shm": shm,
            "sdk_version": sdk_version,
            "adopt": self.adopt_producer_shm,
        }
        endpoint = FakeProducerEndpoint(producer, identity, kwargs)
        self.producers.append(endpoint)
        producer.on_connect()
        return endpoint

    def connect_relay_client(self, machine_id: int, client_id: int) -> RelayEndpoint:
        return self.relays.connect(machine_id, client_id)

    def connect_consumer(self, consumer: Consumer, uid: int) -> FakeConsumerEndpoint:
        endpoint = FakeConsumerEndpoint(consumer, uid)
        self.consumers.append(endpoint)
        consumer.on_connect()
        return endpoint


class HostThread:
    """A ServiceIPCHost serving `service` on a background asyncio loop."""

    def __init__(self, service: FakeService, producer_socket: str, consumer_socket: str) -> None:
        self.service = service
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self.host: ServiceIPCHost = self.call(lambda: ServiceIPCHost(service, loop=self.loop))
        self.call(lambda: self.host.start([producer_socket], consumer_socket))

    def call(self, function: Callable[[], T]) -> T:
        """Runs `function` on the loop and returns its result."""
        future: concurrent.futures.Future[T] = concurrent.futures.Future()

        def run() -> None:
            try:
                future.set_result(function())
            except BaseException as exc:
                future.set_exception(exc)

        self.loop.call_soon_threadsafe(run)
        return future.result(10)

    def close(self) -> None:
        self.call(self.host.close)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


class RecordingProducer:
    """A `Producer` that records the service's calls (made on the IPC thread)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []
        self.connected = threading.Event()
        self.disconnected = threading.Event()
        self.setup = threading.Event()

    def names(self) -> list[str]:
        return [name for name, _ in self.events]

    def on_connect(self) -> None:
        self.events.append(("on_connect", None))
        self.connected.set()

    def on_disconnect(self) -> None:
        self.events.append(("on_disconnect", None))
        self.disconnected.set()

    def on_tracing_setup(self) -> None:
        self.events.append(("on_tracing_setup", None))
        self.setup.set()

    def setup_data_source(self, instance_id: int, config: DataSourceConfig) -> None:
        self.events.append(("setup_data_source", (instance_id, config.SerializeToString())))

    def start_data_source(self, instance_id: int, config: DataSourceConfig) -> None:
        self.events.append(("start_data_source", (instance_id, config.SerializeToString())))

    def stop_data_source(self, instance_id: int) -> None:
        self.events.append(("stop_data_source", instance_id))

    def flush(self, request_id: int, instance_ids: Sequence[int], flags: int) -> None:
        self.events.append(("flush", (request_id, list(instance_ids), flags)))

    def clear_incremental_state(self, instance_ids: Sequence[int]) -> None:
        self.events.append(("clear_incremental_state", list(instance_ids)))


class RecordingConsumer:
    """A `Consumer` that records the service's calls (made on the IPC thread)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []
        self.packets: list[bytes] = []
        self.read_done = threading.Event()
        self.disabled = threading.Event()
        self.connected = threading.Event()
        self.disconnected = threading.Event()

    def names(self) -> list[str]:
        return [name for name, _ in self.events]

    def on_connect(self) -> None:
        self.connected.set()

    def on_disconnect(self) -> None:
        self.disconnected.set()

    def on_tracing_disabled(self, error: str) -> None:
        self.events.append(("on_tracing_disabled", error))
        self.disabled.set()

    def on_trace_data(self, packets: Sequence[TracePacketSlices], has_more: bool) -> None:
        self.packets.extend(b"".join(bytes(piece) for piece in packet) for packet in packets)
        self.events.append(("on_trace_data", has_more))
        if not has_more:
            self.read_done.set()

    def on_detach(self, success: bool) -> None:
        self.events.append(("on_detach", success))

    def on_attach(self, success: bool, config: TraceConfig) -> None:
        self.events.append(("on_attach", (success, config.SerializeToString())))

    def on_trace_stats(self, success: bool, stats: TraceStats) -> None:
        self.events.append(("on_trace_stats", (success, stats.producers_connected)))

    def on_observable_events(self, events: ObservableEvents) -> None:
        self.events.append(("on_observable_events", events.SerializeToString()))
