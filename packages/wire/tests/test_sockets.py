"""Socket names, stale socket files, SCM_RIGHTS limits, abstract and TCP sockets."""

from __future__ import annotations

import json
import os
import socket
import uuid
from pathlib import Path
from typing import Any

import pytest
from perfetto_protos.ipc import producer_port_pb2 as pp
from perfetto_wire import (
    Client,
    Host,
    HostServer,
    ServiceProxy,
    WireError,
    parse_address,
    remove_stale_socket,
)
from perfetto_wire._sockets import TruncatedMessageError, recv_with_fd, send_with_fd
from wire_testlib import LoopThread, ThreadHost


@pytest.mark.parametrize(
    ("name", "family", "sockaddr"),
    [
        ("@perfetto-producer", socket.AF_UNIX, "\0perfetto-producer"),
        ("/tmp/perfetto-producer", socket.AF_UNIX, "/tmp/perfetto-producer"),
        ("relative.sock", socket.AF_UNIX, "relative.sock"),
        ("127.0.0.1:32278", socket.AF_INET, ("127.0.0.1", 32278)),
        ("localhost:0", socket.AF_INET, ("localhost", 0)),
        ("[::1]:32279", socket.AF_INET6, ("::1", 32279)),
        ("vsock://2:9000", socket.AF_VSOCK, (2, 9000)),
        ("/tmp/name:with-colon", socket.AF_UNIX, "/tmp/name:with-colon"),
    ],
)
def test_parse_address(name: str, family: socket.AddressFamily, sockaddr: Any) -> None:
    address = parse_address(name)
    assert address.family == family
    assert address.sockaddr == sockaddr


@pytest.mark.parametrize("name", ["", "vsock://x:1", "[::1:80"])
def test_bad_addresses_are_refused(name: str) -> None:
    with pytest.raises(WireError):
        parse_address(name)


def test_remove_stale_socket(sock_dir: Path) -> None:
    stale = sock_dir / "stale.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(stale))
    listener.close()
    assert remove_stale_socket(str(stale))
    assert not stale.exists()
    assert not remove_stale_socket(str(stale))

    live = sock_dir / "live.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(live))
    listener.listen()
    try:
        with pytest.raises(WireError, match="in use"):
            remove_stale_socket(str(live))
        assert live.exists()
    finally:
        listener.close()

    regular = sock_dir / "regular"
    regular.write_text("not a socket")
    assert not remove_stale_socket(str(regular))
    assert regular.exists()


def open_fds() -> set[int]:
    """The fds open in this process (minus the one used to list them)."""
    found = set()
    for name in os.listdir("/proc/self/fd"):
        try:
            os.fstat(int(name))
        except OSError:
            continue
        found.add(int(name))
    return found


def test_at_most_one_fd_per_message_extras_closed() -> None:
    sender, receiver = socket.socketpair()
    pipes = [os.pipe() for _ in range(2)]
    try:
        before = open_fds()
        sender.sendmsg(
            [b"x"],
            [
                (
                    socket.SOL_SOCKET,
                    socket.SCM_RIGHTS,
                    b"".join(w.to_bytes(4, "little") for _, w in pipes),
                )
            ],
        )
        nbytes, fd = recv_with_fd(receiver, memoryview(bytearray(16)))
        assert nbytes == 1
        assert fd is not None
        assert open_fds() - before == {fd}
        assert os.fstat(fd).st_ino == os.fstat(pipes[0][1]).st_ino
        os.close(fd)
    finally:
        sender.close()
        receiver.close()
        for read_end, write_end in pipes:
            os.close(read_end)
            os.close(write_end)


def test_truncated_ancillary_data_fails_the_read_and_leaks_nothing() -> None:
    sender, receiver = socket.socketpair()
    pipes = [os.pipe() for _ in range(4)]
    try:
        before = open_fds()
        payload = b"".join(w.to_bytes(4, "little") for _, w in pipes)
        sender.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, payload)])
        with pytest.raises(TruncatedMessageError):
            recv_with_fd(receiver, memoryview(bytearray(16)))
        assert open_fds() == before
    finally:
        sender.close()
        receiver.close()
        for read_end, write_end in pipes:
            os.close(read_end)
            os.close(write_end)


def test_fd_travels_with_the_first_byte_only() -> None:
    sender, receiver = socket.socketpair()
    read_end, write_end = os.pipe()
    try:
        assert send_with_fd(sender, b"abc", write_end) == 3
        buffer = memoryview(bytearray(1))
        first = recv_with_fd(receiver, buffer)
        second = recv_with_fd(receiver, buffer)
        assert first[1] is not None
        assert second == (1, None)
        os.close(first[1])
    finally:
        sender.close()
        receiver.close()
        os.close(read_end)
        os.close(write_end)


def whoami(client: Client, proxy: ServiceProxy) -> dict[str, Any]:
    request = pp.RegisterDataSourceRequest()
    request.data_source_descriptor.name = "whoami"
    reply = client.invoke(proxy, "RegisterDataSource", request).result(10)
    result: dict[str, Any] = json.loads(reply.unwrap(pp.RegisterDataSourceResponse).error)
    return result


def test_abstract_socket(thread_host: ThreadHost) -> None:
    name = f"@perfetto-wire-test-{uuid.uuid4().hex}"
    assert thread_host.call(lambda: thread_host.server.listen(name)) == name
    with Client(name) as client:
        info = whoami(client, client.bind("ProducerPort").result(10))
    assert info["pid"] == os.getpid()
    assert info["uid"] == os.getuid()


def test_tcp_socket_identity_comes_from_set_peer_identity(thread_host: ThreadHost) -> None:
    name = thread_host.call(lambda: thread_host.server.listen("127.0.0.1:0"))
    host, _, port = name.rpartition(":")
    assert host == "127.0.0.1"
    assert int(port) > 0
    with Client(name) as client:
        proxy = client.bind("ProducerPort").result(10)
        before = whoami(client, proxy)

        def identify() -> None:
            connection = client.async_client.connection
            assert connection is not None
            connection.set_peer_identity(pid=321, uid=654, machine_id_hint="box")

        client.post(identify)
        after = whoami(client, proxy)
    assert (before["uid"], before["pid"]) == (0, -1)
    assert (after["uid"], after["pid"]) == (654, 321)


def test_listening_twice_on_one_path_fails(loop_thread: LoopThread, sock_dir: Path) -> None:
    path = str(sock_dir / "busy.sock")

    def listen_twice() -> None:
        server = HostServer(Host(), loop=loop_thread.loop)
        server.listen(path)
        try:
            with pytest.raises(WireError, match="cannot listen"):
                server.listen(path)
        finally:
            server.close()

    loop_thread.call(listen_twice)
