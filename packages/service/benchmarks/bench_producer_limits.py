"""What one producer can make traced hold, and how registrations scale.

A `traced` subprocess on temporary sockets; one producer speaking the wire protocol by hand
(no client library in the way). Measured:

* RegisterTraceWriter: traced's RSS (VmRSS from /proc) after InitializeConnection, then after
  `--writers` calls with writer ids 1, 2, ... (drop_reply, then one Sync so that all were
  handled). Writer ids above upstream's 32767 are refused, so the RSS stays bounded.
* RegisterDataSource: the round-trip time of each of `--data-sources` registrations (distinct
  names and ids): the first 100 against the last 100, as medians, and their ratio.
* A consumer's producer_name_regex_filter `(a+)+b` with a producer named `--regex-name` a's:
  how long another consumer's QueryCapabilities waits for its answer meanwhile.

    python packages/service/benchmarks/bench_producer_limits.py [--writers N] [--data-sources N]
        [--regex-name N]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from perfetto_protos.common.data_source_descriptor_pb2 import DataSourceDescriptor
from perfetto_protos.config.trace_config_pb2 import TraceConfig
from perfetto_protos.ipc import producer_port_pb2 as pb
from perfetto_protos.ipc.wire_protocol_pb2 import IPCFrame
from perfetto_service import Consumer, ConsumerIPCClient
from perfetto_wire import FrameDecoder, encode_frame
from perfetto_wire._call_frames import encode_invoke

TIMEOUT = 600.0
BATCH = 10_000
WINDOW = 100


class RawProducer:
    """A ProducerPort connection driven frame by frame."""

    def __init__(self, path: str, name: str = "bench.limits") -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(TIMEOUT)
        self.sock.connect(path)
        self.decoder = FrameDecoder()
        self.request_id = 0
        bind = IPCFrame(request_id=self._next_id())
        bind.msg_bind_service.service_name = "ProducerPort"
        reply = self._exchange(encode_frame(bind)).msg_bind_service_reply
        assert reply.success, "ProducerPort not bound"
        self.service_id = reply.service_id
        self.methods = {method.name: method.id for method in reply.methods}
        request = pb.InitializeConnectionRequest(producer_name=name)
        assert self.call("InitializeConnection", request.SerializeToString()).success

    def _next_id(self) -> int:
        self.request_id += 1
        return self.request_id

    def _exchange(self, data: bytes) -> IPCFrame:
        self.sock.sendall(data)
        while True:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("traced closed the connection")
            frames = self.decoder.feed(chunk)
            if frames:
                return frames[-1]

    def frame(self, method: str, args: bytes, *, drop_reply: bool) -> bytes:
        """One InvokeMethod frame of `method`."""
        return encode_invoke(
            self._next_id(), self.service_id, self.methods[method], args, drop_reply
        )

    def call(self, method: str, args: bytes) -> IPCFrame.InvokeMethodReply:
        """Invokes `method` and waits for its reply."""
        return self._exchange(self.frame(method, args, drop_reply=False)).msg_invoke_method_reply

    def close(self) -> None:
        self.sock.close()


def rss_kib(pid: int) -> int:
    """The resident set of `pid`, in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


def start_traced(directory: str) -> tuple[subprocess.Popen[bytes], str]:
    """A traced subprocess; returns once its producer socket accepts connections."""
    env = dict(os.environ)
    producer = f"{directory}/producer"
    env["PERFETTO_PRODUCER_SOCK_NAME"] = producer
    env["PERFETTO_CONSUMER_SOCK_NAME"] = f"{directory}/consumer"
    read_end, write_end = os.pipe()
    env["TRACED_NOTIFY_FD"] = str(write_end)
    process = subprocess.Popen(
        [sys.executable, "-m", "perfetto_service.traced"],
        env=env,
        pass_fds=(write_end,),
        stderr=subprocess.DEVNULL,
    )
    os.close(write_end)
    with os.fdopen(read_end, "rb") as ready:
        if ready.read(1) != b"1":
            process.kill()
            process.wait()
            raise RuntimeError("traced did not start")
    return process, producer


def writers(path: str, pid: int, count: int) -> None:
    producer = RawProducer(path)
    try:
        before = rss_kib(pid)
        started = time.monotonic()
        for first in range(1, count + 1, BATCH):
            batch = b"".join(
                producer.frame(
                    "RegisterTraceWriter",
                    pb.RegisterTraceWriterRequest(
                        trace_writer_id=writer_id, target_buffer=1
                    ).SerializeToString(),
                    drop_reply=True,
                )
                for writer_id in range(first, min(first + BATCH, count + 1))
            )
            producer.sock.sendall(batch)
        assert producer.call("Sync", b"").success
        elapsed = time.monotonic() - started
        after = rss_kib(pid)
    finally:
        producer.close()
    print(
        f"RegisterTraceWriter x{count:,}: traced RSS {before / 1024:.1f} MiB -> "
        f"{after / 1024:.1f} MiB (+{(after - before) / 1024:.1f} MiB) in {elapsed:.1f} s"
    )


def data_sources(path: str, count: int) -> None:
    producer = RawProducer(path)
    times: list[float] = []
    try:
        for n in range(1, count + 1):
            args = pb.RegisterDataSourceRequest(
                data_source_descriptor=DataSourceDescriptor(name=f"bench.ds.{n}", id=n)
            ).SerializeToString()
            started = time.perf_counter()
            assert producer.call("RegisterDataSource", args).success
            times.append(time.perf_counter() - started)
    finally:
        producer.close()
    first = statistics.median(times[:WINDOW])
    last = statistics.median(times[-WINDOW:])
    print(
        f"RegisterDataSource x{count:,}: median round trip of the first {WINDOW} "
        f"{first * 1e6:.0f} us, of the last {WINDOW} {last * 1e6:.0f} us "
        f"({last / first:.2f}x)"
    )


class _Consumer(Consumer):
    """A consumer that needs no callback."""


def _connected_consumer(path: str) -> ConsumerIPCClient:
    client = ConsumerIPCClient(path, _Consumer())
    client.connect()
    if not client.wait_connected(TIMEOUT):
        raise SystemExit("cannot connect to traced's consumer socket")
    return client


def regex(producer_path: str, consumer_path: str, length: int) -> None:
    producer = RawProducer(producer_path, "a" * length)
    regex_consumer = _connected_consumer(consumer_path)
    other = _connected_consumer(consumer_path)
    try:
        descriptor = DataSourceDescriptor(name="bench.regex")
        args = pb.RegisterDataSourceRequest(data_source_descriptor=descriptor)
        assert producer.call("RegisterDataSource", args.SerializeToString()).success
        config = TraceConfig()
        config.buffers.add(size_kb=64)
        source = config.data_sources.add()
        source.config.name = "bench.regex"
        source.producer_name_regex_filter.append("(a+)+b")
        answered = threading.Event()
        regex_consumer.enable_tracing(config)
        started = time.monotonic()
        other.query_capabilities(lambda _capabilities: answered.set())
        answered.wait(TIMEOUT)
        waited = time.monotonic() - started
    finally:
        regex_consumer.disconnect()
        other.disconnect()
        producer.close()
    print(
        f"producer_name_regex_filter (a+)+b, a producer named {length} a's: another "
        f"consumer's QueryCapabilities answered after {waited * 1e3:.1f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writers", type=int, default=2_000_000)
    parser.add_argument("--data-sources", type=int, default=10_000)
    parser.add_argument("--regex-name", type=int, default=28)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        process, path = start_traced(directory)
        try:
            if args.data_sources:
                data_sources(path, args.data_sources)
            if args.regex_name:
                regex(path, f"{directory}/consumer", args.regex_name)
            if args.writers:
                writers(path, process.pid, args.writers)
        finally:
            process.terminate()
            process.wait(TIMEOUT)


if __name__ == "__main__":
    main()
