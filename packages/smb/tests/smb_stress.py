"""Processes of the multi-process stress test: producers writing, one reader draining."""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.reduction import recv_handle, send_handle

from perfetto_protos.common.commit_data_request_pb2 import CommitDataRequest
from perfetto_smb import (
    BufferExhaustedPolicy,
    PageLayout,
    SharedMemory,
    SharedMemoryABI,
    SharedMemoryArbiter,
    SharedMemoryReader,
)
from perfetto_smb._abi import chunk_size_for_layout
from smb_testlib import (
    Reassembler,
    canonical_packet,
    expected_packet,
    fill_packet,
    split_packet,
)

COMMIT = b"C"
DONE = b"D"


@dataclass(frozen=True)
class ProducerConfig:
    """One producer process: its SMB geometry, threads and packets."""

    index: int
    size: int
    page_size: int
    layout: int
    threads: int
    packets: int
    drop: bool
    pause: float = 0.0
    """Seconds each thread sleeps after a packet (lets the IPC thread and the reader run)."""

    @property
    def max_packet_size(self) -> int:
        """Packets go up to several chunks long."""
        return 4 * chunk_size_for_layout(self.page_size, self.layout)

    def stream(self, thread: int) -> int:
        """The stream id written in every packet of a thread."""
        return self.index * 100 + thread


def producer_main(config: ProducerConfig, conn: Connection) -> None:
    """Creates an SMB, hands its fd to the reader, writes from several threads, reports."""
    shm = SharedMemory.create(config.size)
    conn.send((config.size, config.page_size))
    send_handle(conn, shm.fd, 0)
    tasks: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()

    def ipc_thread() -> None:
        while (task := tasks.get()) is not None:
            task()

    def commit(request: CommitDataRequest, done: Callable[[], None] | None) -> None:
        conn.send_bytes(COMMIT + request.SerializeToString())
        if done is not None:
            done()

    ipc = threading.Thread(target=ipc_thread)
    ipc.start()
    arbiter = SharedMemoryArbiter(
        shm.buffer,
        config.page_size,
        commit,
        post_task=tasks.put,
        page_layout=PageLayout(config.layout),
        stall_timeout=60,
    )
    policy = BufferExhaustedPolicy.DROP if config.drop else BufferExhaustedPolicy.STALL
    report: dict[int, tuple[int, int]] = {}

    def write(thread: int) -> None:
        writer = arbiter.create_trace_writer(1, policy)
        stream = config.stream(thread)
        for seq in range(config.packets):
            fill_packet(writer.new_trace_packet(), stream, seq, config.max_packet_size)
            if config.pause:
                time.sleep(config.pause)
        writer.close()
        report[stream] = (writer.writer_id, writer.drop_count)

    writers = [threading.Thread(target=write, args=(t,)) for t in range(config.threads)]
    for t in writers:
        t.start()
    for t in writers:
        t.join()
    tasks.put(None)
    ipc.join()
    arbiter.flush_pending_commit_data_requests()
    conn.send_bytes(DONE + json.dumps(report).encode())
    conn.close()
    arbiter.close()
    shm.close()


def reader_main(
    configs: list[ProducerConfig], conns: list[Connection], result: Connection, delay: float
) -> None:
    """Drains every producer's commits, reassembles and checks packets, sends a summary."""
    regions = []
    reassemblers: dict[int, Reassembler] = {}
    by_conn: dict[Connection, int] = {}
    for config, conn in zip(configs, conns, strict=True):
        size, page_size = conn.recv()
        shm = SharedMemory.attach(recv_handle(conn), size)
        abi = SharedMemoryABI(shm.buffer, page_size)
        regions.append((shm, abi))
        reassemblers[config.index] = Reassembler(SharedMemoryReader(abi))
        by_conn[conn] = config.index
    reports: dict[int, dict[str, list[int]]] = {}
    open_conns = list(conns)
    patches = dict.fromkeys(reassemblers, 0)
    while open_conns:
        for ready in wait(open_conns, timeout=120):
            assert isinstance(ready, Connection)
            message = ready.recv_bytes()
            index = by_conn[ready]
            if message.startswith(DONE):
                reports[index] = json.loads(message[1:])
                open_conns.remove(ready)
                continue
            if delay:
                time.sleep(delay)
            request = CommitDataRequest.FromString(message[1:])
            patches[index] += len(request.chunks_to_patch)
            reassemblers[index].commit(request)
    summary: dict[str, dict[str, object]] = {}
    for config in configs:
        reassembler = reassemblers[config.index]
        for stream_key, (writer_id, drop_count) in reports[config.index].items():
            sequence = reassembler.writers.get(writer_id)
            packets = [split_packet(p) for p in sequence.packets] if sequence else []
            stream = int(stream_key)
            summary[stream_key] = {
                "drop_count": drop_count,
                "seqs": [p.seq for p in packets],
                "dropped_before": [p.dropped_before for p in packets],
                "wrong_stream": sum(p.stream != stream for p in packets),
                "corrupt": sum(
                    canonical_packet(p.body)
                    != canonical_packet(expected_packet(stream, p.seq, config.max_packet_size))
                    for p in packets
                ),
                "errors": sequence.errors if sequence else [],
                "aborted": sequence.aborted if sequence else 0,
                "held_chunks": len(sequence.chunks) if sequence else 0,
                "rejected": dict(reassembler.reader.rejected),
                "producer_patches": patches[config.index],
            }
    result.send(summary)
    for shm, abi in regions:
        abi.close()
        shm.close()
