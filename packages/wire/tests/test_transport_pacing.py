"""SocketTransport's send timeout is per send (no progress), not per reply; `when_drained`
paces a sender by its peer. Real UNIX sockets, a real asyncio loop, a reader thread."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

from perfetto_wire._endpoint import FrameEndpoint
from perfetto_wire._transport import DRAINED_BELOW, SocketTransport

SEND_TIMEOUT_S = 0.5
PAYLOAD = 256 * 1024


class _Lost(FrameEndpoint):
    """Records only that the connection was lost."""

    def __init__(self, transport: SocketTransport) -> None:
        super().__init__(transport)
        self.lost = False

    def _on_frame(self, frame: object, fd: int | None) -> None:
        raise AssertionError("no frames expected")

    def _on_stray_fd(self, fd: int) -> None:
        raise AssertionError("no fds expected")

    def _on_closed(self) -> None:
        self.lost = True


def _run(
    reader_pause_s: float,
    read_size: int,
    send_timeout: float = SEND_TIMEOUT_S,
    payload: int = PAYLOAD,
) -> tuple[bool, int, float, list[float]]:
    """Queues `payload` bytes to a peer that reads `read_size` bytes every `reader_pause_s`;
    (lost, bytes received, seconds taken, when `when_drained` callbacks ran)."""
    loop = asyncio.new_event_loop()
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    ours.setblocking(False)
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    theirs.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    transport = SocketTransport(loop, ours, send_timeout=send_timeout)
    endpoint = _Lost(transport)
    transport.start(endpoint)
    received = 0
    drained: list[float] = []
    started = time.monotonic()

    def read() -> None:
        nonlocal received
        theirs.settimeout(10)
        while True:
            time.sleep(reader_pause_s)
            try:
                data = theirs.recv(read_size)
            except OSError:
                return
            if not data:
                return
            received += len(data)

    reader = threading.Thread(target=read)
    try:
        transport.send(b"x" * payload)
        transport.when_drained(lambda: drained.append(time.monotonic() - started))
        reader.start()
        deadline = time.monotonic() + 30
        while transport.queued_bytes and not endpoint.lost and time.monotonic() < deadline:
            loop.run_until_complete(asyncio.sleep(0.01))
        taken = time.monotonic() - started
        lost = endpoint.lost
    finally:
        transport.close()
        theirs.shutdown(socket.SHUT_RDWR)
        if reader.is_alive():
            reader.join(30)
        theirs.close()
        loop.close()
    return lost, received, taken, drained


def test_a_peer_that_keeps_reading_is_never_cut_off() -> None:
    # A few KiB (what the small socket buffers hold) every 50 ms: 768 KiB take about 5 s, more
    # than twice the timeout, but the peer never goes 2 s without reading (a timeout that
    # leaves a loaded machine's scheduler room).
    lost, _received, taken, drained = _run(0.05, 64 * 1024, send_timeout=2.0, payload=768 * 1024)
    assert not lost
    assert taken > 2.0
    assert len(drained) == 1


def test_a_peer_that_stops_reading_is_cut_off_after_the_timeout() -> None:
    lost, received, taken, drained = _run(SEND_TIMEOUT_S + 0.7, 64 * 1024)
    assert lost
    assert received < PAYLOAD
    assert taken >= SEND_TIMEOUT_S
    assert drained == []


def test_when_drained_runs_at_once_when_little_is_queued() -> None:
    loop = asyncio.new_event_loop()
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    ours.setblocking(False)
    transport = SocketTransport(loop, ours, send_timeout=SEND_TIMEOUT_S)
    calls: list[int] = []
    try:
        transport.send(b"y" * 100)
        transport.when_drained(lambda: calls.append(transport.queued_bytes))
        assert calls == [0]
        assert transport.queued_bytes < DRAINED_BELOW
    finally:
        transport.close()
        theirs.close()
        loop.close()
