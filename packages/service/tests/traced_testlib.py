"""Helpers for the traced tests: the daemon and producer processes, and a consumer."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ipc_fakes import RecordingConsumer
from perfetto_protos.config.trace_config_pb2 import TraceConfig
from perfetto_protos.ipc.wire_protocol_pb2 import IPCFrame
from perfetto_protos.upstream import parse_upstream_trace
from perfetto_service import ConsumerIPCClient
from perfetto_testing import TIMEOUT, NotifyingDaemon, wait_for
from perfetto_wire import FrameDecoder, encode_frame
from perfetto_wire._call_frames import encode_invoke
from protozero import encode_varint

PRODUCER_MAIN = str(Path(__file__).with_name("ipc_producer_main.py"))


class Traced(NotifyingDaemon):
    """A traced subprocess on socket paths under `directory`."""

    def __init__(
        self,
        directory: str,
        *extra_args: str,
        producers: int = 1,
        extra_producer_sockets: Sequence[str] = (),
    ) -> None:
        self.producer_sockets = [f"{directory}/producer{n}" for n in range(producers)]
        self.producer_sockets += extra_producer_sockets
        self.producer_socket = self.producer_sockets[0]
        self.consumer_socket = f"{directory}/consumer"
        self.env = dict(os.environ)
        self.env["PERFETTO_PRODUCER_SOCK_NAME"] = ",".join(self.producer_sockets)
        self.env["PERFETTO_CONSUMER_SOCK_NAME"] = self.consumer_socket
        super().__init__(
            "traced",
            [sys.executable, "-m", "perfetto_service.traced", *extra_args],
            self.env,
            "TRACED_NOTIFY_FD",
        )

    def cpu_seconds(self) -> float:
        """User + system CPU time of the daemon so far (from /proc)."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rpartition(")")[2].split()
        ticks = int(fields[11]) + int(fields[12])
        return ticks / os.sysconf("SC_CLK_TCK")


class ProducerProcess:
    """A producer subprocess (ipc_producer_main.py) whose output lines are collected."""

    def __init__(self, socket: str, name: str, count: int, *args: str) -> None:
        self.name = name
        self.process = subprocess.Popen(
            [sys.executable, PRODUCER_MAIN, socket, name, str(count), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.strip())

    @property
    def pid(self) -> int:
        return self.process.pid

    def count(self, prefix: str) -> int:
        return sum(1 for line in self.lines if line.startswith(prefix))

    def wait_line(self, prefix: str, count: int = 1, timeout: float = TIMEOUT) -> None:
        wait_for(lambda: self.count(prefix) >= count, timeout)

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(TIMEOUT)

    def close(self) -> None:
        if self.process.poll() is None:
            assert self.process.stdin is not None
            try:
                self.process.stdin.close()
                self.process.wait(TIMEOUT)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait(TIMEOUT)
        self._reader.join(TIMEOUT)
        if self.process.stdout is not None:
            self.process.stdout.close()


def start_producers(
    socket: str, names: Sequence[str], count: int, *args: str
) -> list[ProducerProcess]:
    producers = [ProducerProcess(socket, name, count, *args) for name in names]
    for producer in producers:
        producer.wait_line("CONNECTED")
    return producers


class RawClient:
    """One connection to a traced UNIX socket, driven frame by frame (no client library)."""

    def __init__(self, path: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(TIMEOUT)
        self.sock.connect(path)
        self._decoder = FrameDecoder()
        self._request_id = 0

    def _next_id(self) -> int:
        self._request_id += 1
        return self._request_id

    def _exchange(self, data: bytes) -> IPCFrame:
        self.sock.sendall(data)
        while True:
            received = self.sock.recv(65536)
            if not received:
                raise ConnectionError("traced closed the connection")
            frames = self._decoder.feed(received)
            if frames:
                return frames[-1]

    def bind(self, service: str) -> IPCFrame.BindServiceReply:
        """BindService's reply."""
        frame = IPCFrame(request_id=self._next_id())
        frame.msg_bind_service.service_name = service
        return self._exchange(encode_frame(frame)).msg_bind_service_reply

    def frame(self, service_id: int, method_id: int, args: bytes, *, drop_reply: bool) -> bytes:
        """An InvokeMethod frame, to send later (many at once)."""
        return encode_invoke(self._next_id(), service_id, method_id, args, drop_reply)

    def invoke(self, service_id: int, method_id: int, args: bytes) -> IPCFrame.InvokeMethodReply:
        """Invokes a method and waits for its reply."""
        data = self.frame(service_id, method_id, args, drop_reply=False)
        return self._exchange(data).msg_invoke_method_reply

    def close(self) -> None:
        self.sock.close()


def free_tcp_port() -> int:
    """A loopback TCP port nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def make_config(buffer_kb: int = 4096, fill_policy: int = 0, **kwargs: Any) -> TraceConfig:
    """One buffer and the test data source."""
    config = TraceConfig(**kwargs)
    config.buffers.add(size_kb=buffer_kb, fill_policy=fill_policy)
    config.data_sources.add().config.name = "test.ds"
    return config


class ConsumerSession:
    """A ConsumerIPCClient with a recording consumer, closed on exit."""

    def __init__(self, socket: str) -> None:
        self.consumer = RecordingConsumer()
        self.client = ConsumerIPCClient(socket, self.consumer)
        self.client.connect()
        assert self.client.wait_connected(TIMEOUT)

    def read_trace(self) -> Any:
        """Reads the buffers and parses them with upstream's schema."""
        self.consumer.read_done.clear()
        self.consumer.packets.clear()
        self.client.read_buffers()
        assert self.consumer.read_done.wait(TIMEOUT)
        return parse_upstream_trace(packets_as_trace(self.consumer.packets))

    def wait_data_source(self, producer_name: str) -> None:
        """Waits until traced has registered a data source of the producer `producer_name`
        (a producer sends RegisterDataSource without waiting for its reply)."""

        def registered() -> bool:
            replies: list[Any] = []
            done = threading.Event()

            def on_state(ok: bool, state: Any) -> None:
                replies.append(state if ok else None)
                done.set()

            self.client.query_service_state(False, on_state)
            assert done.wait(TIMEOUT)
            state = replies[0]
            ids = {p.id for p in state.producers if p.name == producer_name} if state else set()
            return any(d.producer_id in ids for d in state.data_sources) if state else False

        wait_for(registered, TIMEOUT)

    def wait_disabled(self) -> str:
        assert self.consumer.disabled.wait(TIMEOUT)
        return str(self.consumer.events[-1][1]) if self.consumer.events else ""

    def close(self) -> None:
        self.client.disconnect()


def packets_as_trace(packets: Sequence[bytes]) -> bytes:
    """Packets framed as a Trace file."""
    out = bytearray()
    for packet in packets:
        out += b"\x0a" + encode_varint(len(packet)) + packet
    return bytes(out)


def fortesting_packets(trace: Any) -> list[Any]:
    """The TestEvent packets of a parsed trace."""
    return [packet for packet in trace.packet if packet.HasField("for_testing")]
