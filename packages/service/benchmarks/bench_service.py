"""traced end to end: ingest from producer processes, and ReadBuffers back to a consumer.

A `traced` subprocess on temporary sockets; 4 producer processes (this script with
`--producer`) write track-event-sized packets with `TraceWriter` into their SMBs, committed
with CommitData. Measured:

* ingest: MB/s and packets/s (wall time from the start command to the last producer's
  acknowledged flush), and traced's CPU seconds per MB (from /proc/<pid>/stat);
* ReadBuffers: MB/s of packets streamed back to a `ConsumerIPCClient`, and traced's CPU/MB;
* a full, wrapped 64 MiB RING_BUFFER read back over IPC into a trace file, MB/s end to end.

Same-run reference: a bare Python loop copying the same chunks (the SMB's chunk size) from an
mmap into a bytearray, CPU seconds per MB (median of 7). Each end-to-end figure is the median
of `--runs` sessions.

    python packages/service/benchmarks/bench_service.py [--packets N] [--ring-mib N] [--runs N]
"""

from __future__ import annotations

import argparse
import mmap
import os
import select
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Sequence
from typing import IO

from perfetto_protos.common.data_source_descriptor_pb2 import DataSourceDescriptor
from perfetto_protos.common.observable_events_pb2 import ObservableEvents
from perfetto_protos.common.trace_stats_pb2 import TraceStats
from perfetto_protos.config.data_source_config_pb2 import DataSourceConfig
from perfetto_protos.config.trace_config_pb2 import TraceConfig
from perfetto_protos.trace.trace_packet_pb2 import TracePacket
from perfetto_service import ConsumerIPCClient, ProducerIPCClient, TracePacketSlices
from perfetto_smb import BufferExhaustedPolicy
from protozero import encode_varint

PRODUCERS = 4
DATA_SOURCE = "bench.ds"
SMB_SIZE = 2 * 1024 * 1024
CHUNK_SIZE = 4096 - 8 - 8  # a DIV1 chunk's payload in a 4 KiB page
TIMEOUT = 300.0
MB = 1e6


def track_event_packet(size: int) -> bytes:
    """A TracePacket shaped like an SDK track event, about `size` bytes."""
    packet = TracePacket()
    packet.timestamp = 1_234_567_890_123
    packet.sequence_flags = 2
    event = packet.track_event
    event.type = event.TYPE_SLICE_BEGIN
    event.track_uuid = 0x1234_5678_9ABC
    event.category_iids.append(3)
    event.name = "e"
    base = len(packet.SerializeToString())
    event.name = "e" * max(1, size - base + 1)
    return packet.SerializeToString()


# Producer processes ------------------------------------------------------------------------


class BenchProducer:
    """Writes `count` packets from a writer thread once the data source starts."""

    def __init__(
        self, socket: str, name: str, count: int, size: int, policy: BufferExhaustedPolicy
    ) -> None:
        self.count = count
        self.policy = policy
        self.payload = track_event_packet(size)
        self.started = threading.Event()
        self.done = threading.Event()
        self.target_buffer = 0
        self.client = ProducerIPCClient(socket, self, name, shm_size_hint_bytes=SMB_SIZE)
        self.client.connect()

    def on_connect(self) -> None:
        self.client.register_data_source(DataSourceDescriptor(name=DATA_SOURCE))
        _say("CONNECTED")

    def on_disconnect(self) -> None:
        """Nothing to clean up."""

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

    def write(self) -> None:
        writer = self.client.create_trace_writer(self.target_buffer, self.policy)
        write_packet = writer.write_packet
        payload = self.payload
        for _ in range(self.count):
            write_packet(payload)
        acked = threading.Event()
        writer.flush(acked.set)
        acked.wait(TIMEOUT)
        _say("DONE")


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def producer_main(socket: str, name: str, count: int, size: int, policy: str) -> None:
    producer = BenchProducer(socket, name, count, size, BufferExhaustedPolicy[policy])
    if producer.started.wait(TIMEOUT):
        producer.write()
    sys.stdin.read()
    producer.client.disconnect()


# The benchmark ------------------------------------------------------------------------------


class Traced:
    """A traced subprocess on sockets in a temporary directory."""

    def __init__(self, directory: str) -> None:
        self.producer_socket = f"{directory}/producer"
        self.consumer_socket = f"{directory}/consumer"
        env = dict(os.environ)
        env["PERFETTO_PRODUCER_SOCK_NAME"] = self.producer_socket
        env["PERFETTO_CONSUMER_SOCK_NAME"] = self.consumer_socket
        read_end, write_end = os.pipe()
        env["TRACED_NOTIFY_FD"] = str(write_end)
        self.process = subprocess.Popen(
            [
                sys.executable,
                *os.environ.get("BENCH_TRACED_PREFIX", "").split(),
                "-m",
                "perfetto_service.traced",
            ],
            env=env,
            pass_fds=(write_end,),
            stderr=subprocess.DEVNULL,
        )
        os.close(write_end)
        ready, _, _ = select.select([read_end], [], [], 60)
        os.close(read_end)
        if not ready:
            self.process.kill()
            raise SystemExit("traced did not start")

    def cpu_seconds(self) -> float:
        with open(f"/proc/{self.process.pid}/stat") as stat:
            fields = stat.read().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(60)


class Producers:
    """Producer subprocesses running this script with --producer."""

    def __init__(self, socket: str, count: int, size: int, policy: str) -> None:
        self.processes = [
            subprocess.Popen(
                [
                    sys.executable,
                    __file__,
                    "--producer",
                    socket,
                    f"p{n}",
                    str(count),
                    str(size),
                    policy,
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for n in range(PRODUCERS)
        ]
        for process in self.processes:
            self._expect(process, "CONNECTED")

    @staticmethod
    def _expect(process: subprocess.Popen[str], line: str) -> None:
        stdout: IO[str] | None = process.stdout
        assert stdout is not None
        got = stdout.readline().strip()
        if got != line:
            raise SystemExit(f"producer said {got!r}, expected {line!r}")

    def wait_done(self) -> None:
        for process in self.processes:
            self._expect(process, "DONE")

    def close(self) -> None:
        for process in self.processes:
            assert process.stdin is not None
            assert process.stdout is not None
            process.stdin.close()
            process.wait(60)
            process.stdout.close()


class Reader:
    """A consumer that counts (or writes to a file) what ReadBuffers returns."""

    def __init__(self, output: IO[bytes] | None, event: bytes) -> None:
        self.output = output
        self.event = event
        self.bytes = 0
        self.packets = 0
        self.events = 0
        """Packets the producers wrote (the rest are the service's)."""
        self.done = threading.Event()
        self.disabled = threading.Event()
        self.connected = threading.Event()

    def on_connect(self) -> None:
        self.connected.set()

    def on_disconnect(self) -> None:
        """Nothing to clean up."""

    def on_tracing_disabled(self, error: str) -> None:
        self.disabled.set()

    def on_trace_data(self, packets: Sequence[TracePacketSlices], has_more: bool) -> None:
        parts: list[bytes | memoryview] = []
        total = 0
        for packet in packets:
            size = sum(map(len, packet))
            total += size
            self.events += self.event in b"".join(packet)
            parts.append(b"\x0a" + encode_varint(size))
            parts.extend(packet)
        self.bytes += total
        self.packets += len(packets)
        if self.output is not None:
            self.output.write(b"".join(parts))
        if not has_more:
            self.done.set()

    def on_detach(self, success: bool) -> None:
        """Not used."""

    def on_attach(self, success: bool, config: TraceConfig) -> None:
        """Not used."""

    def on_trace_stats(self, success: bool, stats: TraceStats) -> None:
        """Not used."""

    def on_observable_events(self, events: ObservableEvents) -> None:
        """Not used."""


def _config(buffer_kb: int) -> TraceConfig:
    config = TraceConfig()
    config.buffers.add(size_kb=buffer_kb, fill_policy=TraceConfig.BufferConfig.RING_BUFFER)
    config.data_sources.add().config.name = DATA_SOURCE
    return config


def _session(  # noqa: PLR0917 - the benchmark's options
    traced: Traced, buffer_kb: int, count: int, size: int, output: IO[bytes] | None, policy: str
) -> tuple[dict[str, float], Reader]:
    producers = Producers(traced.producer_socket, count, size, policy)
    reader = Reader(output, track_event_packet(size))
    consumer = ConsumerIPCClient(traced.consumer_socket, reader)
    consumer.connect()
    try:
        if not consumer.wait_connected(60):
            raise SystemExit("cannot connect to traced's consumer socket")
        cpu0, wall0 = traced.cpu_seconds(), time.perf_counter()
        consumer.enable_tracing(_config(buffer_kb))
        producers.wait_done()
        cpu1, wall1 = traced.cpu_seconds(), time.perf_counter()
        consumer.disable_tracing()
        reader.disabled.wait(TIMEOUT)
        cpu2, wall2, own2 = traced.cpu_seconds(), time.perf_counter(), time.process_time()
        consumer.read_buffers()
        reader.done.wait(TIMEOUT)
        if output is not None:
            output.flush()
            os.fsync(output.fileno())
        cpu3, wall3, own3 = traced.cpu_seconds(), time.perf_counter(), time.process_time()
        consumer.free_buffers()
    finally:
        consumer.disconnect()
        producers.close()
    figures = {
        "ingest_wall": wall1 - wall0,
        "ingest_cpu": cpu1 - cpu0,
        "read_wall": wall3 - wall2,
        "read_cpu": cpu3 - cpu2,
        "read_consumer_cpu": own3 - own2,
    }
    return figures, reader


def _median(runs: Iterable[dict[str, float]]) -> dict[str, float]:
    collected = list(runs)
    return {key: statistics.median(run[key] for run in collected) for key in collected[0]}


def baseline_cpu_per_mb(total_bytes: int) -> float:
    """CPU seconds per MB of a bare loop copying CHUNK_SIZE pieces from an mmap."""
    region = mmap.mmap(-1, SMB_SIZE)
    region.write(os.urandom(SMB_SIZE))
    chunks = SMB_SIZE // CHUNK_SIZE
    copied = bytearray(total_bytes + CHUNK_SIZE)
    runs = []
    for _ in range(7):
        start = time.process_time()
        position = 0
        index = 0
        while position < total_bytes:
            offset = (index % chunks) * CHUNK_SIZE
            copied[position : position + CHUNK_SIZE] = region[offset : offset + CHUNK_SIZE]
            position += CHUNK_SIZE
            index += 1
        runs.append(time.process_time() - start)
    region.close()
    return statistics.median(runs) / (total_bytes / MB)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--packets", type=int, default=100_000, help="per producer")
    parser.add_argument("--size", type=int, default=64, help="bytes per ingest packet")
    parser.add_argument("--ring-mib", type=int, default=64)
    parser.add_argument("--runs", type=int, default=3, help="sessions of each kind (median)")
    parser.add_argument(
        "--policy",
        choices=[policy.name for policy in BufferExhaustedPolicy],
        default="STALL",
        help="what the producers' writers do when their SMB is full (DROP: packets are lost)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        traced = Traced(directory)
        try:
            written = len(track_event_packet(args.size)) * args.packets * PRODUCERS
            buffer_kb = max(4096, written * 3 // 2 // 1024)
            runs = [
                _session(traced, buffer_kb, args.packets, args.size, None, args.policy)
                for _ in range(args.runs)
            ]
            figures = _median(run[0] for run in runs)
            reader = runs[0][1]
            read_events = sorted(run[1].events for run in runs)
            ingest_mb = written / MB
            read_mb = reader.bytes / MB
            ring_kb = args.ring_mib * 1024
            big = 1000
            overfill = int(args.ring_mib * 1024 * 1024 * 1.25 / big / PRODUCERS)
            ring_runs = []
            for _ in range(args.runs):
                with tempfile.TemporaryFile(dir=directory) as output:
                    ring_runs.append(_session(traced, ring_kb, overfill, big, output, "STALL"))
                    file_mb = output.seek(0, os.SEEK_END) / MB
            ring = _median(run[0] for run in ring_runs)
            ring_reader = ring_runs[0][1]
        finally:
            traced.stop()
    baseline = baseline_cpu_per_mb(int(ingest_mb * MB))
    ingest_cpu_mb = figures["ingest_cpu"] / ingest_mb
    read_cpu_mb = figures["read_cpu"] / read_mb
    print(
        f"producers: {PRODUCERS} processes x {args.packets} packets of {args.size} B, "
        f"{args.policy} when their SMB is full"
    )
    sent = args.packets * PRODUCERS
    print(
        f"producers' packets read back per session: {read_events} of {sent} written "
        f"(median {100 * (1 - statistics.median(read_events) / sent):.1f} % lost)"
    )
    print(
        f"ingest:      {ingest_mb / figures['ingest_wall']:8.1f} MB/s  "
        f"{args.packets * PRODUCERS / figures['ingest_wall']:10.0f} packets/s  "
        f"traced CPU {ingest_cpu_mb * 1e3:7.2f} ms/MB  "
        f"({1 / ingest_cpu_mb:6.1f} MB per CPU-second)"
    )
    print(
        f"ReadBuffers: {read_mb / figures['read_wall']:8.1f} MB/s  "
        f"traced CPU {read_cpu_mb * 1e3:7.2f} ms/MB"
    )
    print(
        f"baseline (bare mmap -> bytearray chunk copy loop): CPU {baseline * 1e3:7.3f} ms/MB "
        f"({1 / baseline:8.1f} MB per CPU-second)"
    )
    print(f"ratio ingest CPU/MB vs baseline:      {ingest_cpu_mb / baseline:8.2f}x (target <= 3)")
    print(f"ratio ReadBuffers CPU/MB vs baseline: {read_cpu_mb / baseline:8.2f}x")
    print(
        f"wrapped {args.ring_mib} MiB ring buffer -> file over IPC: {file_mb:.1f} MB in "
        f"{ring['read_wall']:.2f} s = {file_mb / ring['read_wall']:.1f} MB/s end to end "
        f"(target >= 70), {ring_reader.packets} packets; CPU during the read: traced "
        f"{ring['read_cpu']:.2f} s, consumer {ring['read_consumer_cpu']:.2f} s"
    )


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--producer":
        producer_main(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6])
    else:
        main()
