"""A producer process for the traced tests: writes numbered TestEvent packets when started.

Run as `python ipc_producer_main.py SOCKET NAME COUNT [--no-flush-ack] [--writers N]
[--size BYTES] [--trigger NAME] [--shm-size BYTES] [--own-smb BYTES]`. It prints
`ADOPTED`/`NOT-ADOPTED` (with --own-smb), `CONNECTED`, `SETUP`, `STARTED <instance>` and
`WROTE <writer_id>` (once the service acknowledged the data) lines, and exits when stdin
closes.
"""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import Sequence

from perfetto_protos.common.data_source_descriptor_pb2 import DataSourceDescriptor
from perfetto_protos.config.data_source_config_pb2 import DataSourceConfig
from perfetto_protos.trace.trace_packet_pb2 import TracePacket
from perfetto_service import ProducerIPCClient
from perfetto_smb import SharedMemory

DATA_SOURCE = "test.ds"


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


class TestProducer:
    """Writes `count` packets per writer from its own threads when a data source starts."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.threads: list[threading.Thread] = []
        own = SharedMemory.create(args.own_smb) if args.own_smb else None
        self.client = ProducerIPCClient(
            args.socket,
            self,
            args.name,
            shm_size_hint_bytes=args.shm_size,
            shm_page_size_hint_bytes=4096 if own is not None else 0,
            producer_shm=own,
        )
        self.own = own
        self.client.connect()

    def on_connect(self) -> None:
        self.client.register_data_source(DataSourceDescriptor(name=DATA_SOURCE))
        if self.args.trigger:
            self.client.activate_triggers([self.args.trigger])
        if self.own is not None:
            _say("ADOPTED" if self.client.shared_memory() is self.own else "NOT-ADOPTED")
        _say("CONNECTED")

    def on_disconnect(self) -> None:
        _say("DISCONNECTED")

    def on_tracing_setup(self) -> None:
        _say("SETUP")

    def setup_data_source(self, instance_id: int, config: DataSourceConfig) -> None:
        """Nothing to prepare."""

    def start_data_source(self, instance_id: int, config: DataSourceConfig) -> None:
        _say(f"STARTED {instance_id}")
        for _ in range(self.args.writers):
            thread = threading.Thread(target=self._write, args=(config.target_buffer,))
            thread.start()
            self.threads.append(thread)

    def _write(self, target_buffer: int) -> None:
        writer = self.client.create_trace_writer(target_buffer)
        filler = "x" * self.args.size
        for number in range(self.args.count):
            packet = TracePacket()
            packet.for_testing.seq_value = number
            packet.for_testing.str = f"{self.args.name}/{writer.writer_id}/{filler}"
            writer.write_packet(packet.SerializeToString())
        committed = threading.Event()
        writer.flush(committed.set)
        committed.wait(60)
        _say(f"WROTE {writer.writer_id}")

    def stop_data_source(self, instance_id: int) -> None:
        _say(f"STOPPED {instance_id}")

    def flush(self, request_id: int, instance_ids: Sequence[int], flags: int) -> None:
        _say(f"FLUSH {request_id}")
        if self.args.no_flush_ack:
            return
        for thread in self.threads:
            thread.join(10)
        self.client.notify_flush_complete(request_id)

    def clear_incremental_state(self, instance_ids: Sequence[int]) -> None:
        """No incremental state."""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("socket")
    parser.add_argument("name")
    parser.add_argument("count", type=int)
    parser.add_argument("--no-flush-ack", action="store_true")
    parser.add_argument("--writers", type=int, default=1)
    parser.add_argument("--size", type=int, default=0)
    parser.add_argument("--trigger", default="")
    parser.add_argument("--shm-size", type=int, default=0)
    parser.add_argument("--own-smb", type=int, default=0, help="offer an SMB of this size")
    producer = TestProducer(parser.parse_args())
    sys.stdin.read()
    producer.client.disconnect()


if __name__ == "__main__":
    main()
