"""The handshake and record layouts (upstream's sizes), over real sockets and fds."""

from __future__ import annotations

import os
import socket
import threading

import pytest
from heapprofd._errors import HeapprofdError
from heapprofd._native import RECORD_SIZES, SharedRingBuffer
from heapprofd._producer import client_configuration
from heapprofd._wire import (
    CLIENT_CONFIGURATION_SIZE,
    ClientConfiguration,
    client_handshake,
    pack_free,
    pack_heap_name,
    pack_malloc,
    pack_python_frame,
    receive_handshake,
    send_configuration,
)
from perfetto_protos.config.profiling.heapprofd_config_pb2 import HeapprofdConfig


def test_struct_sizes_match_upstream() -> None:
    assert RECORD_SIZES == {
        "alloc_metadata": 328,
        "free_entry": 24,
        "heap_name": 80,
        "python_frame": 24,
    }
    assert len(ClientConfiguration().pack()) == CLIENT_CONFIGURATION_SIZE == 4656
    assert len(pack_malloc(1, 2, 3, 4, heap_id=1, frames=[7, 8])) == 8 + 328 + 16
    assert len(pack_free(1, 2, 1)) == 8 + 24
    assert len(pack_heap_name(1, "python", 4096)) == 8 + 80
    assert len(pack_python_frame(1, "f", "a.py", 3)) == 8 + 24 + 5


def test_client_configuration_round_trips() -> None:
    config = ClientConfiguration(
        default_interval=512,
        block_client_timeout_us=100,
        heaps=[("python", 512), ("pool", 64)],
        block_client=True,
        all_heaps=True,
    )
    data = config.pack()
    assert data[-8:-4] == b"\x01\x00\x00\x01"  # block_client .. all_heaps
    assert ClientConfiguration.unpack(data) == config
    with pytest.raises(HeapprofdError):
        ClientConfiguration.unpack(data[:-1])


def test_heap_intervals_follow_upstreams_rules() -> None:
    config = client_configuration(HeapprofdConfig(sampling_interval_bytes=128))
    assert config.interval_for("python") == 128
    assert config.interval_for("pool") == 0
    config = client_configuration(
        HeapprofdConfig(all_heaps=True, exclude_heaps=["pool"], sampling_interval_bytes=64)
    )
    assert config.interval_for("other") == 64
    assert config.interval_for("pool") == 0
    config = client_configuration(HeapprofdConfig(heaps=["pool"], heap_sampling_intervals=[8]))
    assert config.interval_for("pool") == 8
    assert config.interval_for("python") == 0


def test_handshake_passes_proc_fds_and_the_ring_buffer(tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(tmp_path, "hp")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)
    ring = SharedRingBuffer.create(4096 * 2)
    seen: list[tuple[int, bytes]] = []

    def daemon() -> None:
        conn, _ = listener.accept()
        received = receive_handshake(conn)
        assert received is not None
        pid, maps_fd, mem_fd = received
        seen.append((pid, os.read(maps_fd, 4096)))
        os.close(maps_fd)
        os.close(mem_fd)
        send_configuration(conn, ClientConfiguration(default_interval=1234), ring.fd)
        conn.close()

    thread = threading.Thread(target=daemon)
    thread.start()
    sock, config, ring_fd = client_handshake(path)
    thread.join()
    assert seen[0][0] == os.getpid()
    assert b"python" in seen[0][1]  # the client's own /proc/self/maps
    assert config.default_interval == 1234
    attached = SharedRingBuffer.attach(ring_fd)
    assert attached.write(b"ping") >= 0
    assert ring.read() == b"ping"
    sock.close()
    listener.close()


def test_handshake_refused_by_a_daemon_without_a_session(tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(tmp_path, "hp")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)

    def daemon() -> None:
        conn, _ = listener.accept()
        receive_handshake(conn)
        conn.close()

    thread = threading.Thread(target=daemon)
    thread.start()
    with pytest.raises(HeapprofdError, match="no profiling session"):
        client_handshake(path)
    thread.join()
    listener.close()
