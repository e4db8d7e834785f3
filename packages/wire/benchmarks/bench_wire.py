"""perfetto_wire speed: InvokeMethod round trips and 64 KiB replies over a real UNIX socket.

The host runs in another process (asyncio `HostServer`). Each figure is compared, in the same
run, with a bare Python socket echo that moves the same bytes between two processes: the
request frame one way, the reply frame back (with a three-byte request id varint, as most of
the clients' requests have). Two more references bound what a host on asyncio can reach: the
same echo driven by an asyncio loop, and the minimal protocol work on top of it (a frame
decoded by hand, the request parsed, the reply serialized and framed, the reply parsed by the
client) with none of the library's layers. Runs are interleaved in slices, so that load from
other processes hits every variant alike. Prints ns/op, MB/s and the ratios.

By default every process runs on one CPU, so that a round trip costs the CPU time of both
sides plus two context switches, the same for every variant: on a shared virtual machine,
processes left to the scheduler land on the same or on different CPUs from one run to the
next, and an idle virtual CPU wakes up slowly (guest halt-polling) once the peer has worked for
more than a few microseconds, which swings the ratios by a factor of two. `--spread` measures
that way anyway.

    python packages/wire/benchmarks/bench_wire.py [--round-trips N] [--bulk N] [--runs 7]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import shutil
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import cast

from perfetto_protos.ipc import consumer_port_pb2 as cp
from perfetto_protos.ipc import producer_port_pb2 as pp
from perfetto_protos.ipc.wire_protocol_pb2 import IPCFrame
from perfetto_wire import (
    AsyncClient,
    Client,
    Deferred,
    Host,
    HostServer,
    Reply,
    ServiceDescriptor,
    ServiceProxy,
    encode_frame,
)
from perfetto_wire._call_frames import (
    decode_invoke,
    decode_invoke_reply,
    encode_invoke,
    invoke_reply_header,
)
from perfetto_wire._client import ClientConnection

PAYLOAD_SIZE = 64 * 1024
MB = 1e6


# ---------------------------------------------------------------------------------------------
# Servers (child processes)


def bulk_reply() -> cp.ReadBuffersResponse:
    reply = cp.ReadBuffersResponse()
    reply.slices.add(data=b"\xab" * PAYLOAD_SIZE, last_slice_for_packet=True)
    return reply


def serve_wire(ready: Connection, address: str) -> None:
    """Our host: ProducerPort.Sync answers at once, ConsumerPort.ReadBuffers sends 64 KiB."""
    loop = asyncio.new_event_loop()
    bulk = bulk_reply()

    def sync(request: pp.SyncRequest, call: Deferred) -> pp.SyncResponse:
        return pp.SyncResponse()

    def read_buffers(request: cp.ReadBuffersRequest, call: Deferred) -> cp.ReadBuffersResponse:
        return bulk

    host = Host()
    host.expose_service(ServiceDescriptor.for_service("ProducerPort"), {"Sync": sync})
    host.expose_service(
        ServiceDescriptor.for_service("ConsumerPort"), {"ReadBuffers": read_buffers}
    )
    server = HostServer(host, loop=loop)
    server.listen(address)
    ready.send("ready")
    loop.run_forever()


def serve_echo(ready: Connection, address: str, reply: bytes, request_size: int) -> None:
    """The reference: reads one request's bytes, writes `reply`, forever."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address)
    listener.listen()
    ready.send("ready")
    while True:
        conn, _ = listener.accept()
        with conn:
            while True:
                received = 0
                while received < request_size:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    received += len(chunk)
                if received < request_size:
                    break
                conn.sendall(reply)


def serve_asyncio_echo(ready: Connection, address: str, reply: bytes, request_size: int) -> None:
    """A second reference: the same echo driven by an asyncio loop like our host."""
    loop = asyncio.new_event_loop()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address)
    listener.listen()
    listener.setblocking(False)

    def accept() -> None:
        conn, _ = listener.accept()  # left blocking: reads only follow readiness
        received = [0]

        def readable() -> None:
            chunk = conn.recv(65536)
            if not chunk:
                loop.remove_reader(conn.fileno())
                conn.close()
                return
            received[0] += len(chunk)
            if received[0] >= request_size:
                received[0] = 0
                conn.sendall(reply)

        loop.add_reader(conn.fileno(), readable)

    loop.add_reader(listener.fileno(), accept)
    ready.send("ready")
    loop.run_forever()


def serve_minimal(ready: Connection, address: str) -> None:
    """The protocol floor on asyncio: each InvokeMethod decoded, parsed and answered inline."""
    loop = asyncio.new_event_loop()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address)
    listener.listen()
    listener.setblocking(False)
    buffer = memoryview(bytearray(1 << 17))
    bulk = bulk_reply()

    def accept() -> None:
        conn, _ = listener.accept()  # left blocking: reads only follow readiness

        def readable() -> None:
            size = conn.recv_into(buffer)
            call = decode_invoke(buffer, 4, size) if size else None
            if call is None:
                loop.remove_reader(conn.fileno())
                conn.close()
                return
            request_id, service_id, _, args, _ = call
            if service_id == 1:
                pp.SyncRequest.FromString(cast(bytes, args))
                reply = pp.SyncResponse().SerializeToString()
            else:
                cp.ReadBuffersRequest.FromString(cast(bytes, args))
                reply = bulk.SerializeToString()
            conn.sendmsg([invoke_reply_header(request_id, False, len(reply)), reply])

        loop.add_reader(conn.fileno(), readable)

    loop.add_reader(listener.fileno(), accept)
    ready.send("ready")
    loop.run_forever()


def start(target: Callable[..., None], *args: object) -> multiprocessing.process.BaseProcess:
    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe()
    process = context.Process(target=target, args=(child, *args), daemon=True)
    process.start()
    if not parent.poll(30):
        raise RuntimeError("server did not start")
    parent.recv()
    return process


# ---------------------------------------------------------------------------------------------
# Frames: what goes over the socket for one round trip


REFERENCE_REQUEST_ID = 1 << 14
"""The request id of the reference frames: a three-byte varint like most of our clients' ids."""


def invoke_bytes(request_id: int, service_id: int, method_id: int) -> bytes:
    frame = IPCFrame(request_id=request_id)
    call = frame.msg_invoke_method
    call.service_id, call.method_id, call.args_proto, call.drop_reply = (
        service_id,
        method_id,
        b"",
        False,
    )
    return encode_frame(frame)


def reply_bytes(request_id: int, message: bytes) -> bytes:
    frame = IPCFrame(request_id=request_id)
    reply = frame.msg_invoke_method_reply
    reply.success, reply.has_more, reply.reply_proto = True, False, message
    return encode_frame(frame)


# ---------------------------------------------------------------------------------------------
# Clients


def echo_client(address: str, request: bytes, reply_size: int) -> Callable[[int], float]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(address)
    buffer = bytearray(max(reply_size, 65536))
    view = memoryview(buffer)

    def run(iterations: int) -> float:
        started = time.perf_counter()
        for _ in range(iterations):
            sock.sendall(request)
            received = 0
            while received < reply_size:
                received += sock.recv_into(view[received:])
        return time.perf_counter() - started

    return run


def minimal_client(
    address: str, ids: tuple[int, int], request: object, reply_size: int
) -> Callable[[int], float]:
    """The protocol floor on the client side: frames written and read inline, no library."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(address)
    view = memoryview(bytearray(1 << 17))
    assert isinstance(request, pp.SyncRequest | cp.ReadBuffersRequest)
    service_id, method_id = ids
    reply_type = pp.SyncResponse if service_id == 1 else cp.ReadBuffersResponse
    next_id = [REFERENCE_REQUEST_ID]

    def run(iterations: int) -> float:
        started = time.perf_counter()
        for _ in range(iterations):
            request_id = next_id[0]
            next_id[0] += 1
            sock.sendall(
                encode_invoke(request_id, service_id, method_id, request.SerializeToString(), False)
            )
            received = 0
            while received < reply_size:
                received += sock.recv_into(view[received:])
            reply = decode_invoke_reply(view, 4, received)
            assert reply is not None
            reply_type.FromString(cast(bytes, reply[3]))
        return time.perf_counter() - started

    return run


class BlockingTransport:
    """Drives a ClientConnection over a blocking socket in the calling thread."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def send(self, data: bytes, fd: int | None = None) -> None:
        self.sock.sendall(data)

    def close(self) -> None:
        self.sock.close()


def core_client(address: str, service: str, method: str, request: object) -> Callable[[int], float]:
    """The sans-I/O ClientConnection over a blocking socket, no threads, no event loop."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(address)
    connection = ClientConnection(BlockingTransport(sock))
    buffer = memoryview(bytearray(1 << 17))
    done: list[object] = []

    def pump() -> None:
        while not done:
            received = sock.recv_into(buffer)
            if not received:
                raise ConnectionError("host went away")
            connection.receive_data(buffer[:received])

    connection.bind(service, done.append)
    pump()
    proxy = done.pop()
    assert isinstance(proxy, ServiceProxy)
    assert isinstance(request, pp.SyncRequest | cp.ReadBuffersRequest)

    def run(iterations: int) -> float:
        started = time.perf_counter()
        for _ in range(iterations):
            connection.invoke(proxy, method, request, done.append)
            pump()
            reply = done.pop()
            assert isinstance(reply, Reply)
        return time.perf_counter() - started

    return run


def async_client(
    address: str, service: str, method: str, request: object
) -> Callable[[int], float]:
    """AsyncClient awaited from a coroutine on the benchmark thread's loop."""
    loop = asyncio.new_event_loop()
    client = AsyncClient(address, loop=loop)
    proxy = loop.run_until_complete(client.bind_service(service))
    assert isinstance(request, pp.SyncRequest | cp.ReadBuffersRequest)

    async def many(iterations: int) -> None:
        for _ in range(iterations):
            await client.call(proxy, method, request)

    def run(iterations: int) -> float:
        started = time.perf_counter()
        loop.run_until_complete(many(iterations))
        return time.perf_counter() - started

    return run


def threaded_client(
    address: str, service: str, method: str, request: object
) -> Callable[[int], float]:
    """The threaded Client: a future per call, the socket on its IPC thread."""
    client = Client(address)
    proxy = client.bind(service).result(10)
    assert isinstance(request, pp.SyncRequest | cp.ReadBuffersRequest)

    def run(iterations: int) -> float:
        started = time.perf_counter()
        for _ in range(iterations):
            client.invoke(proxy, method, request).result(10)
        return time.perf_counter() - started

    return run


SLICES = 20
"""Each run is cut into this many slices, the runners taking turns slice by slice."""


def measure(
    runners: dict[str, Callable[[int], float]], iterations: int, runs: int
) -> dict[str, float]:
    """Median seconds per run of each runner, runs interleaved slice by slice across runners."""
    for run in runners.values():
        run(max(1, iterations // 10))
    step = max(1, iterations // SLICES)
    samples: dict[str, list[float]] = {name: [] for name in runners}
    for _ in range(runs):
        elapsed = dict.fromkeys(runners, 0.0)
        done = 0
        while done < iterations:
            count = min(step, iterations - done)
            for name, run in runners.items():
                elapsed[name] += run(count)
            done += count
        for name, seconds in elapsed.items():
            samples[name].append(seconds)
    return {name: statistics.median(times) for name, times in samples.items()}


CLIENTS: dict[str, Callable[[str, str, str, object], Callable[[int], float]]] = {
    "ClientConnection, blocking socket": core_client,
    "AsyncClient (asyncio)": async_client,
    "Client (IPC thread + futures)": threaded_client,
}
REFERENCE = "bare socket echo"
ASYNCIO_REFERENCE = "asyncio socket echo"
FLOOR_REFERENCE = "minimal protocol on asyncio"


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--round-trips", type=int, default=10_000)
    parser.add_argument("--bulk", type=int, default=2_000)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument(
        "--spread",
        action="store_true",
        help="let the scheduler place the processes (default: all on one CPU, see above)",
    )
    args = parser.parse_args(argv)

    placement = "scheduler's choice of CPUs"
    if not args.spread:
        cpu = max(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpu})  # the servers and threads started below inherit it
        placement = f"every process on CPU {cpu}"
    workdir = tempfile.mkdtemp(prefix="pwb-")
    wire_address = os.path.join(workdir, "wire.sock")
    minimal_address = os.path.join(workdir, "minimal.sock")
    servers = [start(serve_wire, wire_address), start(serve_minimal, minimal_address)]

    producer = ServiceDescriptor.for_service("ProducerPort")
    consumer = ServiceDescriptor.for_service("ConsumerPort")
    request_id = REFERENCE_REQUEST_ID
    cases = [
        (
            "round trip",
            args.round_trips,
            invoke_bytes(request_id, 1, producer.method("Sync").id),
            reply_bytes(request_id, b""),
            ("ProducerPort", "Sync", pp.SyncRequest()),
            (1, producer.method("Sync").id),
        ),
        (
            "64 KiB reply",
            args.bulk,
            invoke_bytes(request_id, 2, consumer.method("ReadBuffers").id),
            reply_bytes(request_id, bulk_reply().SerializeToString()),
            ("ConsumerPort", "ReadBuffers", cp.ReadBuffersRequest()),
            (2, consumer.method("ReadBuffers").id),
        ),
    ]
    python = sys.version.split()[0]
    print(
        f"perfetto_wire benchmark: median of {args.runs} interleaved runs, python {python}, "
        f"{placement}"
    )
    try:
        for label, iterations, request, reply, (service, method, message), ids in cases:
            echo_address = os.path.join(workdir, f"echo-{len(servers)}.sock")
            servers.append(start(serve_echo, echo_address, reply, len(request)))
            asyncio_echo_address = os.path.join(workdir, f"aecho-{len(servers)}.sock")
            servers.append(start(serve_asyncio_echo, asyncio_echo_address, reply, len(request)))
            runners = {
                REFERENCE: echo_client(echo_address, request, len(reply)),
                ASYNCIO_REFERENCE: echo_client(asyncio_echo_address, request, len(reply)),
                FLOOR_REFERENCE: minimal_client(minimal_address, ids, message, len(reply)),
            }
            for name, factory in CLIENTS.items():
                runners[name] = factory(wire_address, service, method, message)
            results = measure(runners, iterations, args.runs)
            reference = results[REFERENCE]
            print(f"\n{label}: {len(request)} B request, {len(reply)} B reply, x{iterations}")
            for name, elapsed in results.items():
                line = f"  {name:<34} {elapsed / iterations * 1e9:>10.0f} ns/op"
                line += _throughput(reply, iterations, elapsed)
                if name != REFERENCE:
                    line += f"   ratio vs echo {reference / elapsed:.2f}"
                print(line)
    finally:
        for server in servers:
            server.terminate()
            server.join(5)
        shutil.rmtree(workdir, ignore_errors=True)


def _throughput(reply: bytes, iterations: int, elapsed: float) -> str:
    if len(reply) < PAYLOAD_SIZE:
        return f" {iterations / elapsed:>10.0f} round trips/s"
    return f" {len(reply) * iterations / elapsed / MB:>10.1f} MB/s"


if __name__ == "__main__":
    main(sys.argv[1:])
