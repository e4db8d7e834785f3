"""traced's resources, end to end: file descriptors, buffer memory, large state replies."""

from __future__ import annotations

import os
import resource
import socket
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import pytest
from ipc_fakes import wait_for
from traced_testlib import TIMEOUT, ConsumerSession, Traced


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
