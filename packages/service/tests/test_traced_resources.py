"""traced's resources, end to end: file descriptors, buffer memory, large state replies."""

from __future__ import annotations

import array
import fcntl
import os
import resource
import socket
import struct
import tempfile
import termios
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from perfetto_testing import TIMEOUT, wait_for
from traced_testlib import ConsumerSession, Traced, fortesting_packets, make_config, start_producers

MIB = 1 << 20


@pytest.fixture
def traced() -> Iterator[Traced]:
    with tempfile.TemporaryDirectory() as directory, Traced(directory) as daemon:
        yield daemon


def _service_state(session: ConsumerSession) -> Any:
    states: list[Any] = []
    session.client.query_service_state(False, lambda ok, state: states.append((ok, state)))
    wait_for(lambda: states, TIMEOUT)
    ok, state = states[0]
    assert ok
    return state


def _open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_out_of_file_descriptors_backs_off_logs_once_and_keeps_serving(traced: Traced) -> None:
    existing = ConsumerSession(traced.consumer_socket)
    clients: list[socket.socket] = []
    try:
        limit = _open_fds(traced.pid) + 8
        resource.prlimit(traced.pid, resource.RLIMIT_NOFILE, (limit, limit))
        # Connections past the limit wait in the listen backlog; traced hits EMFILE.
        for _ in range(16):
            client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            clients.append(client)
            client.connect(traced.consumer_socket)
        wait_for(lambda: _open_fds(traced.pid) >= limit, TIMEOUT)
        wait_for(lambda: any("Too many open files" in line for line in traced.log), TIMEOUT)
        lines_before = len(traced.log)
        time.sleep(2.0)
        assert len(traced.log) - lines_before <= 2, traced.log[lines_before:][:5]

        assert _service_state(existing).num_sessions == 0

        for client in clients:
            client.close()
        clients.clear()
        wait_for(lambda: _open_fds(traced.pid) < limit - 4, TIMEOUT)
        late = ConsumerSession(traced.consumer_socket)
        try:
            assert _service_state(late).num_sessions == 0
        finally:
            late.close()
        assert sum("Too many open files" in line for line in traced.log) == 1, traced.log
    finally:
        for client in clients:
            client.close()
        existing.close()


def _rss(pid: int) -> int:
    """Resident memory of a process in bytes (VmRSS)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for {pid}")


def test_a_one_gib_buffer_costs_what_is_written_not_its_size() -> None:
    with (
        tempfile.TemporaryDirectory() as directory,
        Traced(directory, "--max-buffer-memory-mb", "2048") as daemon,
    ):
        consumer = ConsumerSession(daemon.consumer_socket)
        (producer,) = start_producers(daemon.producer_socket, ["writer"], 1000, "--size", "1000")
        try:
            before = _rss(daemon.pid)
            consumer.client.enable_tracing(make_config(buffer_kb=1024 * 1024))
            producer.wait_line("WROTE")
            grown = _rss(daemon.pid) - before
            consumer.client.disable_tracing()
            assert consumer.wait_disabled() == ""
            trace = consumer.read_trace()
        finally:
            producer.close()
            consumer.close()
    # ~1 MB of packets went into the 1 GiB buffer, all of it read back.
    assert len(fortesting_packets(trace)) == 1000
    assert grown < 50 * MIB, f"traced's RSS grew by {grown / MIB:.0f} MiB"


def test_sessions_past_the_buffer_memory_limit_are_refused() -> None:
    with (
        tempfile.TemporaryDirectory() as directory,
        Traced(directory, "--max-buffer-memory-mb", "64") as daemon,
    ):
        first = ConsumerSession(daemon.consumer_socket)
        second = ConsumerSession(daemon.consumer_socket)
        try:
            first.client.enable_tracing(make_config(buffer_kb=48 * 1024))
            wait_for(lambda: _service_state(first).num_sessions == 1, TIMEOUT)
            second.client.enable_tracing(make_config(buffer_kb=32 * 1024))
            error = second.wait_disabled()
            assert error == (
                "Failed to allocate tracing buffers: 32768 KB requested, 49152 KB in use, "
                "traced's limit is 65536 KB (traced --max-buffer-memory-mb)"
            )
            assert _service_state(first).num_sessions == 1
            # Once the first session's buffers are freed, the same request fits.
            first.client.disable_tracing()
            assert first.wait_disabled() == ""
            first.client.free_buffers()
            wait_for(lambda: _service_state(first).num_sessions == 0, TIMEOUT)
            third = ConsumerSession(daemon.consumer_socket)
            try:
                third.client.enable_tracing(make_config(buffer_kb=32 * 1024))
                wait_for(lambda: _service_state(third).num_sessions == 1, TIMEOUT)
            finally:
                third.close()
        finally:
            second.close()
            first.close()


def _unread_bytes(sock: socket.socket) -> int:
    """Bytes sent on a UNIX socket that its peer has not read yet."""
    out = array.array("i", [0])
    fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, out)
    return out[0]


def _wait_all_read(clients: list[socket.socket]) -> None:
    """Waits until traced has read everything sent on `clients`."""
    wait_for(lambda: not any(map(_unread_bytes, clients)), TIMEOUT)


HALF_FRAME_ROUNDS = 5
HALF_FRAME_CONNECTIONS = 400


def test_connections_dropped_mid_frame_give_their_memory_back(traced: Traced) -> None:
    # Each connection announces a frame of the largest size and sends all but 68 bytes of it.
    size = 131072 - 4
    half_frame = struct.pack("<I", size) + bytes(size - 68)
    fds = _open_fds(traced.pid)  # no connection yet
    warm_up = ConsumerSession(traced.consumer_socket)
    try:
        warm_up.client.enable_tracing(make_config(duration_ms=1))
        assert warm_up.wait_disabled() == ""
    finally:
        warm_up.close()
    wait_for(lambda: _open_fds(traced.pid) <= fds, TIMEOUT)
    baseline = _rss(traced.pid)
    peaks = []
    afters = []
    for _ in range(HALF_FRAME_ROUNDS):
        clients: list[socket.socket] = []
        try:
            for n in range(HALF_FRAME_CONNECTIONS):
                client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                clients.append(client)
                client.connect(traced.producer_socket if n % 2 else traced.consumer_socket)
                client.sendall(half_frame)
            # traced has read every half frame: each connection holds one.
            _wait_all_read(clients)
            peaks.append(_rss(traced.pid) - baseline)
        finally:
            for client in clients:
                client.close()
        wait_for(lambda: _open_fds(traced.pid) <= fds, TIMEOUT)
        afters.append(_rss(traced.pid) - baseline)
    held = [f"{p / MIB:.0f}/{a / MIB:.0f}" for p, a in zip(peaks, afters, strict=True)]
    # While open, a half frame costs what it holds (at most the frame size limit, as
    # upstream's); once dropped, nothing.
    assert max(peaks) < HALF_FRAME_CONNECTIONS * (size + 4096) + 24 * MIB, held
    assert max(afters) < 16 * MIB, f"MiB held at the peak/after each round: {held}"
    session = ConsumerSession(traced.consumer_socket)
    (producer,) = start_producers(traced.producer_socket, ["after"], 10)
    try:
        session.client.enable_tracing(make_config())
        producer.wait_line("WROTE")
        session.client.disable_tracing()
        assert session.wait_disabled() == ""
        assert len(fortesting_packets(session.read_trace())) == 10
    finally:
        producer.close()
        session.close()
