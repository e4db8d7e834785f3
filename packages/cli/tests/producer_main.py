"""A producer process for the perfetto command's tests.

Run as `python producer_main.py SOCKET DATA_SOURCE COUNT [EXTRA [PAYLOAD]]`. Registers
DATA_SOURCE (and EXTRA more, DATA_SOURCE.0 to DATA_SOURCE.<EXTRA - 1>, in batches); on start
prints `CONFIG <hex of the DataSourceConfig it received>`, writes COUNT TestEvent packets
(for_testing.seq_value 0..COUNT-1, for_testing.str "payload" or PAYLOAD bytes of "x") and
prints `WROTE`; acknowledges flushes. Prints `CONNECTED` first (once every data source is
registered) and exits when stdin closes.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence

from perfetto_protos.common.data_source_descriptor_pb2 import DataSourceDescriptor
from perfetto_protos.config.data_source_config_pb2 import DataSourceConfig
from perfetto_protos.trace.trace_packet_pb2 import TracePacket
from perfetto_service import ProducerIPCClient

_BATCH = 200


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


class TestProducer:
    """Writes numbered packets when its data source starts."""

    def __init__(self, socket: str, data_source: str, count: int, extra: int, payload: str) -> None:
        self.data_source = data_source
        self.count = count
        self.extra = extra
        self.payload = payload
        self.registered = 0
        self.writing: list[threading.Thread] = []
        self.client = ProducerIPCClient(socket, self, "cmd-test-producer")
        self.client.connect()

    def on_connect(self) -> None:
        self.client.register_data_source(DataSourceDescriptor(name=self.data_source))
        self._register_more()

    def _register_more(self) -> None:
        """Registers the next batch of extra data sources; says CONNECTED after the last."""
        if self.registered >= self.extra:
            self.client.sync(lambda: _say("CONNECTED"))
            return
        batch_end = min(self.extra, self.registered + _BATCH)
        for number in range(self.registered, batch_end):
            name = f"{self.data_source}.{number}"
            self.client.register_data_source(DataSourceDescriptor(name=name))
        self.registered = batch_end
        # Waiting for the service between batches keeps its replies from piling up unread.
        self.client.sync(self._register_more)

    def on_disconnect(self) -> None:
        _say("DISCONNECTED")

    def on_tracing_setup(self) -> None:
        """Nothing to prepare."""

    def setup_data_source(self, instance_id: int, config: DataSourceConfig) -> None:
        """Nothing to prepare."""

    def start_data_source(self, instance_id: int, config: DataSourceConfig) -> None:
        _say(f"CONFIG {config.SerializeToString().hex()}")
        thread = threading.Thread(target=self._write, args=(config.target_buffer,))
        thread.start()
        self.writing.append(thread)

    def _write(self, target_buffer: int) -> None:
        writer = self.client.create_trace_writer(target_buffer)
        for number in range(self.count):
            packet = TracePacket()
            packet.for_testing.seq_value = number
            packet.for_testing.str = self.payload
            writer.write_packet(packet.SerializeToString())
        committed = threading.Event()
        writer.flush(committed.set)
        committed.wait(60)
        _say("WROTE")

    def stop_data_source(self, instance_id: int) -> None:
        """Nothing to tear down (the descriptor does not ask to notify on stop)."""

    def flush(self, request_id: int, instance_ids: Sequence[int], flags: int) -> None:
        for thread in self.writing:
            thread.join(30)
        self.client.notify_flush_complete(request_id)

    def clear_incremental_state(self, instance_ids: Sequence[int]) -> None:
        """No incremental state."""


def main() -> None:
    socket, data_source, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    extra = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    payload = "x" * int(sys.argv[5]) if len(sys.argv) > 5 else "payload"
    producer = TestProducer(socket, data_source, count, extra, payload)
    sys.stdin.read()
    producer.client.disconnect()


if __name__ == "__main__":
    main()
