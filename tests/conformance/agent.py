"""The producer and consumer of the conformance kit, run by the interpreter of the version tested.

It uses only what every released `perfetto-service` offers (`ProducerIPCClient`,
`ConsumerIPCClient`, `trace_file_bytes`, the generated protobuf classes), so that one file
drives every version. Commands, each printing one line per event on stdout:

    agent.py probe
        `PROBE {"service": VERSION, "client": bool}`: what this version installs.
    agent.py producer SOCKET NAME COUNT
        registers `conformance.custom` and `track_event`; when a session starts them, writes
        COUNT TestEvent packets / COUNT slices (begin + end, interned names) and prints
        `WROTE DATA_SOURCE` once the service has them. Exits when stdin closes.
    agent.py client NAME COUNT
        (versions with perfetto_client) an app on the SYSTEM backend (PERFETTO_PRODUCER_SOCK_NAME):
        once a session enables category `conformance` and the data source
        `conformance.client`, records COUNT `client-slice` slices and COUNT TestEvent packets
        and prints `WROTE client`. Exits when stdin closes.
    agent.py consumer SOCKET OUT DATA_SOURCE...
        enables a session of those data sources (`ENABLED`), waits for a line on stdin, then
        flushes, stops the session, reads the trace into OUT and prints `DONE PACKETS`.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Sequence
from importlib import metadata, util
from typing import Any

from perfetto_protos.common.data_source_descriptor_pb2 import DataSourceDescriptor
from perfetto_protos.common.observable_events_pb2 import ObservableEvents
from perfetto_protos.common.trace_stats_pb2 import TraceStats
from perfetto_protos.config.data_source_config_pb2 import DataSourceConfig
from perfetto_protos.config.trace_config_pb2 import TraceConfig
from perfetto_protos.trace.trace_packet_pb2 import TracePacket
from perfetto_service import (
    ConsumerIPCClient,
    ProducerIPCClient,
    TracePacketSlices,
    trace_file_bytes,
)

CUSTOM = "conformance.custom"
CLIENT_SOURCE = "conformance.client"
CLIENT_CATEGORY = "conformance"
CLIENT_SLICE = "client-slice"
TRACK_EVENT = "track_event"
EVENT_NAMES = ("alpha", "beta", "gamma")
TIMEOUT = 60.0
SEQ_INCREMENTAL_STATE_CLEARED = 1
SEQ_NEEDS_INCREMENTAL_STATE = 2
TYPE_SLICE_BEGIN = 1
TYPE_SLICE_END = 2


def say(*words: object) -> None:
    sys.stdout.write(" ".join(str(word) for word in words) + "\n")
    sys.stdout.flush()


def probe() -> None:
    client = util.find_spec("perfetto_client") is not None
    if client:
        import perfetto_client

        client = hasattr(perfetto_client, "Tracing")
    say("PROBE", json.dumps({"service": metadata.version("perfetto-service"), "client": client}))


def track_uuid(name: str) -> int:
    """A stable 63-bit track uuid for a producer name."""
    return (sum(ord(c) << (i % 56) for i, c in enumerate(name)) | 1) & (2**63 - 1)


def custom_packets(name: str, count: int) -> list[bytes]:
    packets = []
    for number in range(count):
        packet = TracePacket()
        packet.for_testing.seq_value = number
        packet.for_testing.str = f"{name}/{number}"
        packets.append(packet.SerializeToString())
    return packets


def track_event_packets(name: str, count: int) -> list[bytes]:
    """A track descriptor with interned names, then `count` begin/end slice pairs."""
    uuid = track_uuid(name)
    first = TracePacket()
    first.timestamp = time.clock_gettime_ns(time.CLOCK_BOOTTIME)
    first.sequence_flags = SEQ_INCREMENTAL_STATE_CLEARED
    first.track_descriptor.uuid = uuid
    first.track_descriptor.name = name
    for iid, event_name in enumerate(EVENT_NAMES, start=1):
        entry = first.interned_data.event_names.add()
        entry.iid = iid
        entry.name = event_name
    packets = [first.SerializeToString()]
    for number in range(count):
        for kind in (TYPE_SLICE_BEGIN, TYPE_SLICE_END):
            packet = TracePacket()
            packet.timestamp = time.clock_gettime_ns(time.CLOCK_BOOTTIME)
            packet.sequence_flags = SEQ_NEEDS_INCREMENTAL_STATE
            packet.track_event.type = kind  # type: ignore[assignment]
            packet.track_event.track_uuid = uuid
            if kind == TYPE_SLICE_BEGIN:
                packet.track_event.name_iid = 1 + number % len(EVENT_NAMES)
            packets.append(packet.SerializeToString())
    return packets


class AgentProducer:
    """Writes the data of each started data source from a thread of its own."""

    def __init__(self, socket: str, name: str, count: int) -> None:
        self.name = name
        self.count = count
        self.threads: list[threading.Thread] = []
        self.lock = threading.Lock()
        self.names: dict[int, str] = {}
        self.client = ProducerIPCClient(socket, self, name)
        self.client.connect()

    def on_connect(self) -> None:
        for data_source in (CUSTOM, TRACK_EVENT):
            self.client.register_data_source(DataSourceDescriptor(name=data_source))
        self.client.sync(lambda: say("CONNECTED"))

    def on_disconnect(self) -> None:
        say("DISCONNECTED")

    def on_tracing_setup(self) -> None:
        """Writers are created when a data source starts."""

    def setup_data_source(self, instance_id: int, config: DataSourceConfig) -> None:
        """Nothing to prepare."""

    def start_data_source(self, instance_id: int, config: DataSourceConfig) -> None:
        packets = (
            custom_packets(self.name, self.count)
            if config.name == CUSTOM
            else track_event_packets(self.name, self.count)
        )
        thread = threading.Thread(target=self.write, args=(config, packets))
        with self.lock:
            self.threads.append(thread)
        thread.start()

    def write(self, config: DataSourceConfig, packets: list[bytes]) -> None:
        writer = self.client.create_trace_writer(config.target_buffer)
        for packet in packets:
            writer.write_packet(packet)
        committed = threading.Event()
        writer.flush(committed.set)
        committed.wait(TIMEOUT)
        say("WROTE", config.name)

    def stop_data_source(self, instance_id: int) -> None:
        """The writers finished when they flushed."""

    def flush(self, request_id: int, instance_ids: Sequence[int], flags: int) -> None:
        with self.lock:
            threads = list(self.threads)
        for thread in threads:
            thread.join(TIMEOUT)
        self.client.notify_flush_complete(request_id)

    def clear_incremental_state(self, instance_ids: Sequence[int]) -> None:
        """The incremental state is written once per writer and never cleared."""


class AgentConsumer:
    """Records what the service sends back."""

    def __init__(self) -> None:
        self.packets: list[bytes] = []
        self.disabled = threading.Event()
        self.read_done = threading.Event()
        self.error = ""

    def on_connect(self) -> None:
        """Calls are queued until now anyway."""

    def on_disconnect(self) -> None:
        self.disabled.set()
        self.read_done.set()

    def on_tracing_disabled(self, error: str) -> None:
        self.error = error
        self.disabled.set()

    def on_trace_data(self, packets: Sequence[TracePacketSlices], has_more: bool) -> None:
        self.packets.extend(bytes(b"".join(packet)) for packet in packets)
        if not has_more:
            self.read_done.set()

    def on_detach(self, success: bool) -> None:
        """Not used."""

    def on_attach(self, success: bool, config: TraceConfig) -> None:
        """Not used."""

    def on_trace_stats(self, success: bool, stats: TraceStats) -> None:
        """Not used."""

    def on_observable_events(self, events: ObservableEvents) -> None:
        """Not used."""


def run_client(name: str, count: int) -> None:
    import perfetto_client as pc

    category = pc.Category(CLIENT_CATEGORY)
    started = threading.Event()

    class ConformanceSource(pc.DataSource):
        """Writes TestEvent packets."""

        def on_start(self, config: object) -> None:
            started.set()

    ConformanceSource.name = CLIENT_SOURCE
    pc.Tracing.initialize(pc.Backend.SYSTEM)
    ConformanceSource.register()
    say("CONNECTED")
    deadline = time.monotonic() + TIMEOUT
    while not (started.is_set() and pc.is_enabled(category)) and time.monotonic() < deadline:
        time.sleep(0.01)
    for number in range(count):
        with pc.trace_event(category, CLIENT_SLICE, number=number):
            pass

        def write(ctx: Any, number: int = number) -> None:
            packet = ctx.new_trace_packet()
            packet.begin_for_testing().set_str(f"{name}/{number}")

        ConformanceSource.trace(write)
    say("WROTE", "client")
    sys.stdin.read()


def run_consumer(socket: str, out: str, data_sources: Sequence[str]) -> None:
    consumer = AgentConsumer()
    client = ConsumerIPCClient(socket, consumer)
    client.connect()
    if not client.wait_connected(TIMEOUT):
        say("ERROR", "cannot connect")
        return
    config = TraceConfig()
    config.buffers.add(size_kb=8192)
    for name in data_sources:
        config.data_sources.add().config.name = name
    client.enable_tracing(config)
    say("ENABLED")
    sys.stdin.readline()
    flushed = threading.Event()
    outcome: list[bool] = []

    def on_flush(success: bool) -> None:
        outcome.append(success)
        flushed.set()

    client.flush(int(TIMEOUT * 1000) // 2, on_flush)
    flushed.wait(TIMEOUT)
    say("FLUSHED", outcome[0] if outcome else "timeout")
    client.disable_tracing()
    consumer.disabled.wait(TIMEOUT)
    client.read_buffers()
    consumer.read_done.wait(TIMEOUT)
    with open(out, "wb") as file:
        file.write(trace_file_bytes([packet] for packet in consumer.packets))
    say("DONE", len(consumer.packets), json.dumps(consumer.error))
    client.disconnect()


def main(argv: list[str]) -> None:
    command = argv[0]
    if command == "probe":
        probe()
    elif command == "producer":
        socket, name, count = argv[1], argv[2], int(argv[3])
        producer = AgentProducer(socket, name, count)
        sys.stdin.read()
        producer.client.disconnect()
    elif command == "client":
        run_client(argv[1], int(argv[2]))
    elif command == "consumer":
        run_consumer(argv[1], argv[2], argv[3:])
    else:
        raise SystemExit(f"agent: unknown command {command!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
