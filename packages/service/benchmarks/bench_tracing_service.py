"""TracingService throughput: ingest through SMB + CommitData, and read-back of a full buffer.

Ingest: 4 in-process producers write track-event-sized packets with `TraceWriter` into their
own SMBs (created by the service); the service's CommitData (the serialized request decoded as
the producer port does, chunks validated, moved out of shared memory, freed, copied into one
central buffer) is timed on its own, in CPU seconds, and per chunk.
Same-run reference: a bare Python loop copying the same chunks from the mmap into a
bytearray. Read-back: a wrapped 64 MiB RING_BUFFER drained into a trace file (what
write_into_file does, 1 MiB per read) and into ReadBuffers replies (the IPC path, 32 KiB
per read), wall time end to end. Median of 7 runs.

    python packages/service/benchmarks/bench_tracing_service.py [--runs N] [--mib N]
        [--page-kb N] [--skip-read] [--commits-only]

Instructions per CommitData chunk, load-independent: the difference between two runs of
`valgrind --tool=callgrind --toggle-collect=starmap_next python ... --commits-only --mib N`
(N = 1 and 2: what a run pays once cancels out) divided by the difference in chunks moved.
"""

from __future__ import annotations

import argparse
import collections
import itertools
import os
import random
import statistics
import struct
import tempfile
import time
from collections.abc import Callable, Sequence

from perfetto_protos.common.commit_data_request_pb2 import CommitDataRequest
from perfetto_protos.common.data_source_descriptor_pb2 import DataSourceDescriptor
from perfetto_protos.common.observable_events_pb2 import ObservableEvents
from perfetto_protos.common.trace_stats_pb2 import TraceStats
from perfetto_protos.config.data_source_config_pb2 import DataSourceConfig
from perfetto_protos.config.trace_config_pb2 import TraceConfig
from perfetto_service import ClientIdentity, TracePacketSlices, TracingService
from perfetto_service.core._chunk_mover import commit_data_request
from perfetto_service.core._consumer_endpoint import ConsumerEndpointImpl
from perfetto_service.core._producer_endpoint import ProducerEndpointImpl
from perfetto_service.core._read_slicer import read_buffers_replies
from perfetto_smb import SharedMemoryArbiter, TraceWriter
from protozero import encode_varint, write_redundant_varint

RUNS = 7
PRODUCERS = 4
_CHUNK_PAYLOAD = 4088 - 8


class _Runner:
    """A TaskRunner that runs posted tasks when asked; delayed tasks never run."""

    def __init__(self) -> None:
        self.tasks: list[Callable[[], None]] = []

    def post_task(self, task: Callable[[], None]) -> None:
        self.tasks.append(task)

    def post_delayed_task(self, task: Callable[[], None], delay_ms: int) -> None:
        del task, delay_ms

    def run(self) -> None:
        while self.tasks:
            self.tasks.pop(0)()


class _Producer:
    """A producer whose commits are queued for the benchmark to deliver (and time)."""

    def __init__(
        self, service: TracingService, runner: _Runner, index: int, page_size: int
    ) -> None:
        self.page_size = page_size
        self.requests: list[CommitDataRequest] = []
        self.writer: TraceWriter | None = None
        self.arbiter: SharedMemoryArbiter | None = None
        self.endpoint: ProducerEndpointImpl = service.connect_producer(
            self,
            ClientIdentity(1000, 100 + index),
            f"bench.{index}",
            1 << 20,
            False,
            0,
            page_size,
        )
        self.endpoint.register_data_source(DataSourceDescriptor(name="bench"))
        runner.run()

    def _commit(self, request: CommitDataRequest, callback: Callable[[], None] | None) -> None:
        self.requests.append(request)
        del callback

    def on_connect(self) -> None:
        pass

    def on_disconnect(self) -> None:
        pass

    def on_tracing_setup(self) -> None:
        shm = self.endpoint.shared_memory()
        assert shm is not None
        self.arbiter = SharedMemoryArbiter(shm.buffer, self.page_size, self._commit)

    def setup_data_source(self, instance_id: int, config: DataSourceConfig) -> None:
        pass

    def start_data_source(self, instance_id: int, config: DataSourceConfig) -> None:
        assert self.arbiter is not None
        self.writer = self.arbiter.create_trace_writer(config.target_buffer)

    def stop_data_source(self, instance_id: int) -> None:
        pass

    def flush(self, request_id: int, instance_ids: Sequence[int], flags: int) -> None:
        pass

    def clear_incremental_state(self, instance_ids: Sequence[int]) -> None:
        pass


class _Consumer:
    """A consumer that turns what it reads into ReadBuffers replies, as the IPC port does."""

    def __init__(self) -> None:
        self.reply_bytes = 0
        self.done = False

    def on_connect(self) -> None:
        pass

    def on_disconnect(self) -> None:
        pass

    def on_tracing_disabled(self, error: str) -> None:
        pass

    def on_trace_data(self, packets: Sequence[TracePacketSlices], has_more: bool) -> None:
        self.reply_bytes += sum(map(len, read_buffers_replies(packets)))
        self.done = not has_more

    def on_detach(self, success: bool) -> None:
        pass

    def on_attach(self, success: bool, config: TraceConfig) -> None:
        pass

    def on_trace_stats(self, success: bool, stats: TraceStats) -> None:
        pass

    def on_observable_events(self, events: ObservableEvents) -> None:
        pass


def _track_event_packets(count: int, seed: int) -> list[bytes]:
    """20-60 byte TracePackets shaped like SDK track events."""
    rng = random.Random(seed)
    packets = []
    for i in range(count):
        event = (
            b"\x48"
            + encode_varint(rng.choice((1, 2, 3)))
            + b"\x50"
            + encode_varint(rng.randrange(1, 300))
        )
        event += b"\x58" + encode_varint(rng.randrange(1 << 20, 1 << 40))
        extra = rng.randrange(0, 34)
        if extra:
            event += b"\xba\x01" + encode_varint(extra) + rng.randbytes(extra)
        packets.append(
            b"\x40"
            + encode_varint(1000 + i)
            + b"\x5a"
            + encode_varint(len(event))
            + event
            + b"\x68\x02"
        )
    return packets


def _session(
    service: TracingService, runner: _Runner, size_kb: int, page_size: int = 4096
) -> tuple[ConsumerEndpointImpl, _Consumer, list[_Producer]]:
    producers = [_Producer(service, runner, i, page_size) for i in range(PRODUCERS)]
    consumer = _Consumer()
    endpoint = service.connect_consumer(consumer, 1000)
    config = TraceConfig()
    config.buffers.add(size_kb=size_kb)
    config.data_sources.add().config.name = "bench"
    config.builtin_data_sources.disable_service_events = True
    endpoint.enable_tracing(config)
    runner.run()
    return endpoint, consumer, producers


def _chunk_spans(request: CommitDataRequest, page_size: int) -> list[tuple[int, int]]:
    return [
        (move.page * page_size + 8, (move.page + 1) * page_size) for move in request.chunks_to_move
    ]


def _ingest_run(packets: list[bytes], page_size: int) -> tuple[float, float, int, int, int]:
    """(service CPU s, reference CPU s, payload bytes, packets, chunks) for one ingest run."""
    runner = _Runner()
    service = TracingService(runner, uid=0)
    _, _, producers = _session(service, runner, 64 * 1024, page_size)
    ring = bytearray(64 * 1024 * 1024)
    ring_pos = 0
    service_cpu = reference_cpu = 0.0
    total_bytes = total_packets = total_chunks = 0
    batch = 2000
    for start in range(0, len(packets), batch):
        part = packets[start : start + batch]
        for producer in producers:
            assert producer.writer is not None
            write = producer.writer.write_packet
            for packet in part:
                write(packet)
            producer.writer.flush()
            total_bytes += sum(map(len, part))
            total_packets += len(part)
            shm = producer.endpoint.shared_memory()
            assert shm is not None
            mem = shm.buffer
            commit = _committer(producer.endpoint)
            for request in producer.requests:
                spans = _chunk_spans(request, page_size)
                serialized = request.SerializeToString()
                total_chunks += len(spans)
                t0 = time.process_time()
                for begin, end in spans:
                    size = end - begin
                    if ring_pos + size > len(ring):
                        ring_pos = 0
                    ring[ring_pos : ring_pos + size] = mem[begin:end]
                    ring_pos += size
                t1 = time.process_time()
                commit(serialized)
                t2 = time.process_time()
                reference_cpu += t1 - t0
                service_cpu += t2 - t1
            producer.requests.clear()
    return service_cpu, reference_cpu, total_bytes, total_packets, total_chunks


def _committer(endpoint: ProducerEndpointImpl) -> Callable[[bytes], None]:
    """CommitData as the producer port hands it to `endpoint`: decoded from its bytes."""

    def commit(data: bytes) -> None:
        endpoint.commit_data_bytes(commit_data_request(data))

    return commit


def _commits_only(packets: list[bytes], page_size: int) -> int:
    """Commits `packets` as `_ingest_run` does, with each CommitData (decoded from its bytes
    and moved) called from `itertools.starmap`, and nothing else; returns the chunks moved.

    Under `valgrind --tool=callgrind --toggle-collect=starmap_next` only the commits count.
    """
    runner = _Runner()
    service = TracingService(runner, uid=0)
    _, _, producers = _session(service, runner, 64 * 1024, page_size)
    chunks = 0
    for start in range(0, len(packets), 2000):
        part = packets[start : start + 2000]
        for producer in producers:
            assert producer.writer is not None
            write = producer.writer.write_packet
            for packet in part:
                write(packet)
            producer.writer.flush()
            endpoint = producer.endpoint
            requests = [(r.SerializeToString(),) for r in producer.requests]
            chunks += sum(len(r.chunks_to_move) for r in producer.requests)
            producer.requests.clear()
            collections.deque(itertools.starmap(_committer(endpoint), requests), maxlen=0)
    return chunks


def _chunks(packets: list[bytes]) -> list[tuple[bytes, int]]:
    """Packets packed whole into 4 KiB-page chunk payloads: (payload, packet count)."""
    chunks = []
    payload = bytearray()
    count = 0
    for packet in packets:
        fragment = bytearray(4)
        write_redundant_varint(fragment, 0, len(packet))
        if len(payload) + 4 + len(packet) > _CHUNK_PAYLOAD:
            chunks.append((bytes(payload) + bytes(_CHUNK_PAYLOAD - len(payload)), count))
            payload = bytearray()
            count = 0
        payload += fragment + packet
        count += 1
    return chunks


def _filled_session(
    chunks: list[tuple[bytes, int]], fill_bytes: int
) -> tuple[TracingService, _Runner, ConsumerEndpointImpl, _Consumer]:
    """A session whose 64 MiB ring buffer was written `fill_bytes` (emulation-mode commits)."""
    runner = _Runner()
    service = TracingService(runner, uid=0)
    endpoint, consumer, producers = _session(service, runner, 64 * 1024)
    written = 0
    chunk_id = [0] * PRODUCERS
    header = struct.Struct("<IHH")
    while written < fill_bytes:
        for index, producer in enumerate(producers):
            assert producer.writer is not None
            request = CommitDataRequest()
            for payload, count in chunks[:64]:
                move = request.chunks_to_move.add(page=0, chunk=0, target_buffer=1)
                move.data = header.pack(chunk_id[index], 1, count) + payload
                chunk_id[index] += 1
                written += len(payload)
            producer.endpoint.commit_data(request)
            chunks = chunks[64:] + chunks[:64]
    return service, runner, endpoint, consumer


def _read_into_file(service: TracingService, endpoint: ConsumerEndpointImpl) -> int:
    session = service.session(endpoint.tracing_session_id)
    assert session is not None
    fd, path = tempfile.mkstemp(prefix="bench-trace-")
    os.unlink(path)
    total = 0
    has_more = True
    try:
        while has_more:
            data, has_more = service.read_buffers_as_trace(session, 1 << 20)
            os.write(fd, data)
            total += len(data)
    finally:
        os.close(fd)
    return total


def _read_as_replies(runner: _Runner, endpoint: ConsumerEndpointImpl, consumer: _Consumer) -> int:
    endpoint.read_buffers()
    runner.run()
    assert consumer.done
    return consumer.reply_bytes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=RUNS, help="runs to take the median of")
    parser.add_argument("--mib", type=int, default=4, help="MiB of packets per producer run")
    parser.add_argument(
        "--page-kb", type=int, default=4, help="SMB page size (the SDK's default is 4 KiB)"
    )
    parser.add_argument("--skip-read", action="store_true", help="only the ingest benchmark")
    parser.add_argument(
        "--commits-only",
        action="store_true",
        help="only the commits, for callgrind --toggle-collect=starmap_next (prints the chunks)",
    )
    args = parser.parse_args()
    packets = _track_event_packets(args.mib * 1024 * 1024 // 45, seed=1)
    if args.commits_only:
        print(f"chunks moved: {_commits_only(packets, args.page_kb * 1024)}")
        return

    services, references, rates, ratios = [], [], [], []
    size = count = chunks = 0
    for _ in range(args.runs):
        service_cpu, reference_cpu, size, count, chunks = _ingest_run(packets, args.page_kb * 1024)
        services.append(service_cpu)
        references.append(reference_cpu)
        ratios.append(service_cpu / reference_cpu)
        rates.append(count / service_cpu)
    mb = size / 1e6
    service_s = statistics.median(services)
    reference_s = statistics.median(references)
    print(
        f"ingest, {PRODUCERS} producers, {count} packets of ~{size // count} B ({mb:.1f} MB), "
        f"{args.page_kb} KiB SMB pages"
    )
    print(
        f"  service CommitData:   {mb / service_s:8.1f} MB per CPU-s  "
        f"{statistics.median(rates) / 1e6:6.2f} M packets per CPU-s  "
        f"{service_s / mb:.4f} CPU-s/MB  {service_s / chunks * 1e9:6.0f} ns per chunk"
    )
    print(
        f"  reference mmap copy:  {mb / reference_s:8.1f} MB per CPU-s  "
        f"{reference_s / mb:.4f} CPU-s/MB  {reference_s / chunks * 1e9:6.0f} ns per chunk"
    )
    print(f"  RATIO service/reference CPU per MB: {statistics.median(ratios):.2f} (target <= 3)")

    if args.skip_read:
        return
    for label, packet_list in (
        ("track events", _track_event_packets(200_000, seed=2)),
        ("1000-byte packets", [b"\x0a\xe5\x07" + bytes(997)] * 20_000),
    ):
        ring_chunks = _chunks(packet_list)
        file_rates, reply_rates = [], []
        for _ in range(args.runs):
            service, runner, endpoint, consumer = _filled_session(ring_chunks, 96 << 20)
            t0 = time.perf_counter()
            total = _read_into_file(service, endpoint)
            file_rates.append(total / 1e6 / (time.perf_counter() - t0))
            service, runner, endpoint, consumer = _filled_session(ring_chunks, 96 << 20)
            t0 = time.perf_counter()
            total = _read_as_replies(runner, endpoint, consumer)
            reply_rates.append(total / 1e6 / (time.perf_counter() - t0))
        print(f"read-back of a wrapped 64 MiB ring buffer ({label}):")
        print(f"  into a trace file:      {statistics.median(file_rates):8.1f} MB/s (target >= 70)")
        print(f"  as ReadBuffers replies: {statistics.median(reply_rates):8.1f} MB/s")


if __name__ == "__main__":
    main()
