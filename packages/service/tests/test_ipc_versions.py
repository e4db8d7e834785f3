"""Clients and services of different versions: missing methods and unknown fields.

A client newer than the service finds the methods the service lacks in the bind reply and
degrades; a service older than the client ignores the fields it does not know and passes
those of a data source's config on to the producer, as upstream's does.
"""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Callable, Iterator

import pytest
from google.protobuf.message import Message
from ipc_fakes import FakeService, HostThread, RecordingConsumer, RecordingProducer
from perfetto_protos.common.data_source_descriptor_pb2 import DataSourceDescriptor
from perfetto_protos.common.tracing_service_capabilities_pb2 import TracingServiceCapabilities
from perfetto_protos.config.data_source_config_pb2 import DataSourceConfig
from perfetto_protos.config.trace_config_pb2 import TraceConfig
from perfetto_service import ConsumerIPCClient, ProducerIPCClient
from perfetto_service.ipc.service._consumer_port import ConsumerPort
from perfetto_service.ipc.service._producer_port import ProducerPort
from perfetto_testing import TIMEOUT, wait_for
from perfetto_wire import Deferred, Host, HostServer
from traced_testlib import ConsumerSession, Traced, fortesting_packets, make_config

Handler = Callable[[Message, Deferred], Message | None]
# Fields no version of the schema has: what a newer peer may send.
UNKNOWN_VARINT = bytes([0xF8, 0xFA, 0x03, 0x2A])  # field 8015, varint 42
UNKNOWN_BYTES = bytes([0x82, 0xFB, 0x03, 0x05]) + b"newer"  # field 8016, "newer"


def _first_methods(descriptor_port: type[ConsumerPort] | type[ProducerPort], last: str) -> int:
    names = [method.name for method in descriptor_port.descriptor.methods]
    return names.index(last)


class OlderConsumerPort(ConsumerPort):
    """ConsumerPort as a service from before QueryCapabilities declared it."""

    descriptor = ConsumerPort.descriptor.truncated(
        _first_methods(ConsumerPort, "QueryCapabilities")
    )

    def _handlers(self) -> dict[str, Handler]:
        return {k: v for k, v in super()._handlers().items() if self.descriptor.has_method(k)}


class OlderProducerPort(ProducerPort):
    """ProducerPort as a service from before Sync declared it."""

    descriptor = ProducerPort.descriptor.truncated(_first_methods(ProducerPort, "Sync"))

    def _handlers(self) -> dict[str, Handler]:
        return {k: v for k, v in super()._handlers().items() if self.descriptor.has_method(k)}


@pytest.fixture
def older_service() -> Iterator[tuple[FakeService, str, str]]:
    """A scripted service whose ports are an older version's; (service, producer, consumer)."""
    with tempfile.TemporaryDirectory() as directory:
        service = FakeService()
        thread = HostThread(service, f"{directory}/current-p", f"{directory}/current-c")
        servers: list[HostServer] = []

        def start() -> None:
            for port, name in (
                (OlderProducerPort(service, thread.loop.call_soon), "producer"),
                (OlderConsumerPort(service), "consumer"),
            ):
                host = Host(on_disconnect=port.on_client_disconnected)
                port.expose_on(host)
                server = HostServer(host, loop=thread.loop)
                server.listen(f"{directory}/{name}")
                servers.append(server)

        thread.call(start)
        yield service, f"{directory}/producer", f"{directory}/consumer"
        for server in servers:
            thread.call(server.close)
        thread.close()


def test_a_consumer_calling_a_method_the_service_lacks_gets_the_fallback_and_goes_on(
    older_service: tuple[FakeService, str, str],
) -> None:
    service, _, socket = older_service
    consumer = RecordingConsumer()
    client = ConsumerIPCClient(socket, consumer)
    client.connect()
    try:
        assert client.wait_connected(TIMEOUT)
        assert client.supports("EnableTracing")
        assert not client.supports("QueryCapabilities")
        assert not client.supports("CloneSession")
        answers: list[TracingServiceCapabilities] = []
        client.query_capabilities(answers.append)
        wait_for(lambda: answers, TIMEOUT)
        assert answers == [TracingServiceCapabilities()]
        assert not answers[0].has_query_capabilities
        client.enable_tracing(make_config())
        wait_for(lambda: service.consumers and service.consumers[0].names(), TIMEOUT)
        assert service.consumers[0].names() == ["enable_tracing"]
        assert client.connected
    finally:
        client.disconnect()


def test_a_producer_syncing_with_a_service_without_sync_still_gets_its_callback(
    older_service: tuple[FakeService, str, str],
) -> None:
    service, socket, _ = older_service
    producer = RecordingProducer()
    client = ProducerIPCClient(socket, producer, "newer.producer")
    client.connect()
    try:
        assert client.wait_connected(TIMEOUT)
        assert client.supports("RegisterDataSource")
        assert not client.supports("Sync")
        synced = threading.Event()
        client.sync(synced.set)
        assert synced.wait(TIMEOUT)
        client.register_data_source(DataSourceDescriptor(name="after.sync"))
        wait_for(lambda: service.producers[0].names() == ["register_data_source"], TIMEOUT)
        assert client.connected
    finally:
        client.disconnect()


def test_supports_is_false_before_the_port_is_bound() -> None:
    client = ConsumerIPCClient("/nonexistent/consumer", RecordingConsumer())
    assert not client.supports("EnableTracing")


def test_traced_ignores_unknown_fields_and_passes_a_config_s_on_to_the_producer() -> None:
    with tempfile.TemporaryDirectory() as directory, Traced(directory) as traced:
        producer = RecordingProducer()
        client = ProducerIPCClient(traced.producer_socket, producer, "newer.producer")
        client.connect()
        consumer = ConsumerSession(traced.consumer_socket)
        try:
            assert client.wait_connected(TIMEOUT)
            descriptor = DataSourceDescriptor.FromString(
                DataSourceDescriptor(name="test.ds").SerializeToString() + UNKNOWN_VARINT
            )
            client.register_data_source(descriptor)
            synced = threading.Event()
            client.sync(synced.set)
            assert synced.wait(TIMEOUT)
            config = make_config()
            source = config.data_sources[0].config
            source.MergeFromString(UNKNOWN_BYTES)
            config = TraceConfig.FromString(config.SerializeToString() + UNKNOWN_VARINT)
            consumer.client.enable_tracing(config)
            wait_for(lambda: "start_data_source" in producer.names(), TIMEOUT)
            started = dict(producer.events)["start_data_source"][1]
            received = DataSourceConfig.FromString(started)
            assert received.name == "test.ds"
            assert UNKNOWN_BYTES in received.SerializeToString()
            writer = client.create_trace_writer(received.target_buffer)
            packet = writer.new_trace_packet()
            packet.begin_for_testing().set_str("from a newer producer")
            committed = threading.Event()
            writer.flush(committed.set)
            assert committed.wait(TIMEOUT)
            consumer.client.disable_tracing()
            consumer.wait_disabled()
            trace = consumer.read_trace()
            assert [p.for_testing.str for p in fortesting_packets(trace)] == [
                "from a newer producer"
            ]
        finally:
            consumer.close()
            client.disconnect()
