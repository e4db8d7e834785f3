"""A producer and a consumer on traced, through the service layer's interfaces.

The producer registers a data source and writes one packet when a session starts it; the
consumer records a one-second session and writes the trace to a file. The program starts
its own traced on sockets in a temporary directory and stops it at the end.

Run: `python examples/producer_and_consumer.py [out.pftrace]` (default:
producer_and_consumer.pftrace in the current directory), then open the file in
https://ui.perfetto.dev.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence

from perfetto_protos.common.data_source_descriptor_pb2 import DataSourceDescriptor
from perfetto_protos.config.data_source_config_pb2 import DataSourceConfig
from perfetto_protos.config.trace_config_pb2 import TraceConfig
from perfetto_service import (
    Consumer,
    ConsumerIPCClient,
    Producer,
    ProducerIPCClient,
    TracePacketSlices,
    trace_file_bytes,
)


class MyProducer(Producer):
    def __init__(self, socket: str) -> None:
        self.endpoint = ProducerIPCClient(socket, self, "my.producer")

    def on_connect(self) -> None:
        self.endpoint.register_data_source(DataSourceDescriptor(name="my.source"))

    def start_data_source(self, instance_id: int, config: DataSourceConfig) -> None:
        writer = self.endpoint.create_trace_writer(config.target_buffer)
        packet = writer.new_trace_packet()
        packet.begin_for_testing().set_str("hello")
        writer.flush()


class MyConsumer(Consumer):
    def __init__(self, socket: str, out_path: str) -> None:
        self.endpoint = ConsumerIPCClient(socket, self)
        self.out = open(out_path, "wb")  # noqa: SIM115 - closed once the trace is read
        self.done = threading.Event()
        self.error = ""

    def on_tracing_disabled(self, error: str) -> None:
        self.error = error
        self.endpoint.read_buffers()

    def on_trace_data(self, packets: Sequence[TracePacketSlices], has_more: bool) -> None:
        self.out.write(trace_file_bytes(packets))  # slices are valid only during the call
        if not has_more:
            self.out.close()
            self.done.set()


def record(producer_socket: str, consumer_socket: str, out_path: str) -> str:
    """Records one session; returns the service's error ("" if none)."""
    producer = MyProducer(producer_socket)
    producer.endpoint.connect()
    consumer = MyConsumer(consumer_socket, out_path)
    consumer.endpoint.connect()
    config = TraceConfig(duration_ms=1000)
    config.buffers.add(size_kb=1024)
    config.data_sources.add().config.name = "my.source"
    consumer.endpoint.enable_tracing(config)
    if not consumer.done.wait(30):
        return "timed out"
    consumer.endpoint.disconnect()
    producer.endpoint.disconnect()
    return consumer.error


def main() -> int:
    out_path = sys.argv[1] if len(sys.argv) > 1 else "producer_and_consumer.pftrace"
    with tempfile.TemporaryDirectory() as directory:
        producer_socket, consumer_socket = f"{directory}/producer", f"{directory}/consumer"
        env = os.environ | {
            "PERFETTO_PRODUCER_SOCK_NAME": producer_socket,
            "PERFETTO_CONSUMER_SOCK_NAME": consumer_socket,
        }
        daemon = subprocess.run(
            [sys.executable, "-m", "perfetto_service.traced", "--background"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        pid = int(daemon.stdout)
        try:
            error = record(producer_socket, consumer_socket, out_path)
        finally:
            os.kill(pid, signal.SIGTERM)
    if error:
        print(f"the session failed: {error}", file=sys.stderr)
        return 1
    print(f"wrote {os.path.getsize(out_path)} bytes to {out_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
