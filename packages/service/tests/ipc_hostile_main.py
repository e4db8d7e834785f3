"""A hostile producer process: once started, it commits chunks crafted to break the service.

Run as `python ipc_hostile_main.py SOCKET`. It prints `CONNECTED`, `ATTACKED` once every bad
commit was sent and acknowledged (the service answered a Sync after them), and exits when
stdin closes. One good packet ("HOSTILE-GOOD") is committed among the bad ones.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence

from perfetto_protos.common.commit_data_request_pb2 import CommitDataRequest
from perfetto_protos.common.data_source_descriptor_pb2 import DataSourceDescriptor
from perfetto_protos.config.data_source_config_pb2 import DataSourceConfig
from perfetto_protos.trace.trace_packet_pb2 import TracePacket
from perfetto_service import ProducerIPCClient
from perfetto_smb import ChunkFlags, PageLayout, SharedMemoryABI
from protozero import write_redundant_varint


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _fragment_header(size: int) -> bytes:
    out = bytearray(4)
    write_redundant_varint(out, 0, size)
    return bytes(out)


def _packet(text: str, **extra: int) -> bytes:
    packet = TracePacket()
    packet.for_testing.str = text
    for name, value in extra.items():
        setattr(packet, name, value)
    return packet.SerializeToString()


class HostileProducer:
    """Registers the test data source and waits to be started."""

    def __init__(self, socket: str) -> None:
        self.started = threading.Event()
        self.target_buffer = 0
        self.client = ProducerIPCClient(socket, self, "hostile")
        self.client.connect()

    def on_connect(self) -> None:
        self.client.register_data_source(DataSourceDescriptor(name="test.ds"))
        _say("CONNECTED")

    def on_disconnect(self) -> None:
        _say("DISCONNECTED")

    def on_tracing_setup(self) -> None:
        """The SMB is mapped."""

    def setup_data_source(self, instance_id: int, config: DataSourceConfig) -> None:
        """Nothing to prepare."""

    def start_data_source(self, instance_id: int, config: DataSourceConfig) -> None:
        self.target_buffer = config.target_buffer
        self.started.set()

    def stop_data_source(self, instance_id: int) -> None:
        """Nothing to stop."""

    def flush(self, request_id: int, instance_ids: Sequence[int], flags: int) -> None:
        self.client.notify_flush_complete(request_id)

    def clear_incremental_state(self, instance_ids: Sequence[int]) -> None:
        """No incremental state."""

    def attack(self) -> None:
        shm = self.client.shared_memory()
        assert shm is not None
        page_size = self.client.shared_buffer_page_size_kb() * 1024
        abi = SharedMemoryABI(shm.buffer, page_size)
        pages = shm.size // page_size
        # Pages from the end: the arbiter hands out pages from the start.
        page = pages - 1
        abi.try_partition_page(page, PageLayout.DIV4)
        buffer = self.target_buffer
        request = CommitDataRequest()

        def commit_chunk(
            index: int, writer_id: int, payload: bytes, count: int, flags: int = 0
        ) -> None:
            chunk = abi.try_acquire_chunk_for_writing(
                page, index, chunk_id=0, writer_id=writer_id, packet_count=count, flags=flags
            )
            assert chunk is not None
            abi.buffer[chunk.payload_begin : chunk.payload_begin + len(payload)] = payload
            abi.release_chunk_as_complete(chunk)
            request.chunks_to_move.add(page=page, chunk=index, target_buffer=buffer)

        good = _packet("HOSTILE-GOOD")
        zero = _packet("HOSTILE-WRITER-ZERO")
        reserved = _packet("HOSTILE-RESERVED", trusted_uid=0)
        commit_chunk(0, 0, _fragment_header(len(zero)) + zero, 1)
        commit_chunk(
            1, 7, _fragment_header(len(reserved)) + reserved + _fragment_header(len(good)) + good, 2
        )
        lie = _packet("HOSTILE-LYING-FRAGMENT")
        commit_chunk(2, 8, _fragment_header(60000) + lie, 1)
        commit_chunk(
            3,
            9,
            _fragment_header(len(lie)) + lie,
            1,
            flags=ChunkFlags.LAST_PACKET_CONTINUES_ON_NEXT_CHUNK,
        )
        # Chunks that do not exist, are not complete, or go to a buffer that is not ours.
        request.chunks_to_move.add(page=100000, chunk=0, target_buffer=buffer)
        request.chunks_to_move.add(page=0, chunk=13, target_buffer=buffer)
        request.chunks_to_move.add(page=page - 1, chunk=0, target_buffer=buffer)
        request.chunks_to_move.add(page=page, chunk=0, target_buffer=buffer + 1000)
        # Patches for chunks that are not ours or do not exist, and out of bounds.
        patch = request.chunks_to_patch.add(target_buffer=buffer, writer_id=1, chunk_id=0)
        patch.patches.add(offset=1 << 30, data=b"\xff\xff\xff\xff")
        patch = request.chunks_to_patch.add(target_buffer=buffer, writer_id=7, chunk_id=0)
        patch.patches.add(offset=4000, data=b"\xff\xff\xff\xff")
        patch.patches.add(offset=0, data=b"\xff")
        # Led by unknown fields, a group among them, that traced's own walk of CommitData
        # leaves to protobuf: the request is still served whole.
        unknown = b"\x43\x08\x01\x44\x3a\x02ab"
        self.client.commit_data(CommitDataRequest.FromString(unknown + request.SerializeToString()))
        self.client.register_trace_writer(0, buffer)
        done = threading.Event()
        self.client.sync(done.set)
        done.wait(30)
        _say("ATTACKED")


def main() -> None:
    producer = HostileProducer(sys.argv[1])
    if producer.started.wait(60):
        producer.attack()
    sys.stdin.read()
    producer.client.disconnect()


if __name__ == "__main__":
    main()
