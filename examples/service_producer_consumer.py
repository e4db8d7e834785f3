"""Records a trace through `traced` with a producer and a consumer of perfetto-service.

    python examples/service_producer_consumer.py OUT.pftrace

Starts the `traced` installed beside this interpreter on private sockets, connects a
producer that registers a data source and writes ten TestEvent packets when a session
starts it, and a consumer that runs the session and writes the trace to OUT.pftrace
(it opens in ui.perfetto.dev).
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path

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

DATA_SOURCE = "example.events"
TIMEOUT = 30.0


class ExampleProducer:
    """Writes ten packets from a thread of its own when the data source starts."""

    def __init__(self, socket: str) -> None:
        self.endpoint = ProducerIPCClient(socket, self, "example.producer")
        self.registered = threading.Event()
        self.written = threading.Event()
        self.endpoint.connect()

    def on_connect(self) -> None:
        self.endpoint.register_data_source(DataSourceDescriptor(name=DATA_SOURCE))
        self.endpoint.sync(self.registered.set)

    def on_disconnect(self) -> None:
        """Nothing to clean up."""

    def on_tracing_setup(self) -> None:
        """The writer is created when the data source starts."""

    def setup_data_source(self, instance_id: int, config: DataSourceConfig) -> None:
        """Nothing to prepare."""

    def start_data_source(self, instance_id: int, config: DataSourceConfig) -> None:
        threading.Thread(target=self.write, args=(config.target_buffer,)).start()

    def write(self, target_buffer: int) -> None:
        writer = self.endpoint.create_trace_writer(target_buffer)
        for number in range(10):
            packet = TracePacket()
            packet.for_testing.seq_value = number
            packet.for_testing.str = f"event {number}"
            writer.write_packet(packet.SerializeToString())
        writer.flush(self.written.set)

    def stop_data_source(self, instance_id: int) -> None:
        """The packets were flushed when written."""

    def flush(self, request_id: int, instance_ids: Sequence[int], flags: int) -> None:
        self.endpoint.notify_flush_complete(request_id)

    def clear_incremental_state(self, instance_ids: Sequence[int]) -> None:
        """No incremental state."""


class ExampleConsumer:
    """Collects the packets of the session once it ends."""

    def __init__(self, socket: str) -> None:
        self.endpoint = ConsumerIPCClient(socket, self)
        self.packets: list[bytes] = []
        self.disabled = threading.Event()
        self.read = threading.Event()
        self.endpoint.connect()

    def on_connect(self) -> None:
        """Calls made before the connection are sent now."""

    def on_disconnect(self) -> None:
        self.disabled.set()
        self.read.set()

    def on_tracing_disabled(self, error: str) -> None:
        if error:
            print(f"example: the session failed: {error}", file=sys.stderr)
        self.disabled.set()

    def on_trace_data(self, packets: Sequence[TracePacketSlices], has_more: bool) -> None:
        self.packets.append(trace_file_bytes(packets))
        if not has_more:
            self.read.set()

    def on_detach(self, success: bool) -> None:
        """Not used."""

    def on_attach(self, success: bool, config: TraceConfig) -> None:
        """Not used."""

    def on_trace_stats(self, success: bool, stats: TraceStats) -> None:
        """Not used."""

    def on_observable_events(self, events: ObservableEvents) -> None:
        """Not used."""


def start_traced(directory: str) -> subprocess.Popen[bytes]:
    """The `traced` of this environment on sockets in `directory`, once it is serving."""
    env = dict(os.environ)
    env["PERFETTO_PRODUCER_SOCK_NAME"] = f"{directory}/producer.sock"
    env["PERFETTO_CONSUMER_SOCK_NAME"] = f"{directory}/consumer.sock"
    read_end, write_end = os.pipe()
    env["TRACED_NOTIFY_FD"] = str(write_end)
    traced = Path(sys.executable).parent / "traced"
    process = subprocess.Popen([str(traced)], env=env, pass_fds=(write_end,))
    os.close(write_end)
    ready, _, _ = select.select([read_end], [], [], TIMEOUT)
    os.close(read_end)
    if not ready:
        process.kill()
        raise SystemExit("example: traced did not start")
    return process


def main(out: str) -> None:
    with tempfile.TemporaryDirectory() as directory:
        traced = start_traced(directory)
        try:
            producer = ExampleProducer(f"{directory}/producer.sock")
            producer.registered.wait(TIMEOUT)
            consumer = ExampleConsumer(f"{directory}/consumer.sock")
            config = TraceConfig()
            config.buffers.add(size_kb=1024)
            config.data_sources.add().config.name = DATA_SOURCE
            consumer.endpoint.enable_tracing(config)
            producer.written.wait(TIMEOUT)
            consumer.endpoint.disable_tracing()
            consumer.disabled.wait(TIMEOUT)
            consumer.endpoint.read_buffers()
            consumer.read.wait(TIMEOUT)
            Path(out).write_bytes(b"".join(consumer.packets))
            consumer.endpoint.disconnect()
            producer.endpoint.disconnect()
        finally:
            traced.send_signal(signal.SIGTERM)
            traced.wait(TIMEOUT)
    print(f"example: wrote {out}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: service_producer_consumer.py OUT.pftrace")
    main(sys.argv[1])
