"""The relay (upstream's traced_relay): local producers reach a remote `traced` through it.

Each producer connection accepted on the relay's socket is paired with a new connection to
the remote service's producer socket; the relay sends a SetPeerIdentity frame first (the
producer's pid and uid, this machine's id hint and name), then copies bytes both ways
unchanged, so any service, ours or upstream's, serves the producer as a remote machine's.
Beside them, a `RelayClient` binds the remote RelayPort, reports this machine's SystemInfo
(InitRelay) and exchanges clock readings (SyncClock PING then UPDATE, every 30 s).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import struct
from collections.abc import Callable, Sequence
from pathlib import Path

from perfetto_protos.common.system_info_pb2 import SystemInfo as SystemInfoProto
from perfetto_protos.ipc import relay_port_pb2 as pb
from perfetto_protos.ipc.wire_protocol_pb2 import IPCFrame
from perfetto_wire import (
    AsyncClient,
    Reply,
    ServiceProxy,
    WireError,
    encode_frame,
    parse_address,
    remove_stale_socket,
)

from perfetto_service._errors import ServiceError
from perfetto_service.core._service_packets import (
    capture_clock_snapshot,
    collect_system_info,
    machine_name,
)

__all__ = [
    "CLOCK_SYNC_INTERVAL_S",
    "RelayClient",
    "RelayService",
    "machine_id_hint",
    "machine_name",
    "system_info_message",
]

_log = logging.getLogger("perfetto_service")

CLOCK_SYNC_INTERVAL_S = 30.0
"""Seconds between two clock exchanges with the remote service, as upstream's relay."""

_MAX_RETRY_DELAY_S = 30.0
_COPY_CHUNK = 64 * 1024
_INVALID_PID_UID = -1


def machine_id_hint() -> str:
    """This machine's id hint: the kernel's boot id, as upstream's relay sends."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def system_info_message(tracing_service_version: str) -> SystemInfoProto:
    """This machine's SystemInfo, what InitRelay carries."""
    info = collect_system_info(tracing_service_version)
    message = SystemInfoProto(tracing_service_version=info.tracing_service_version)
    if info.timezone_off_mins is not None:
        message.timezone_off_mins = info.timezone_off_mins
    if info.utsname is not None:
        sysname, version, machine, release = info.utsname
        message.utsname.sysname = sysname
        message.utsname.version = version
        message.utsname.machine = machine
        message.utsname.release = release
    if info.page_size is not None:
        message.page_size = info.page_size
    if info.num_cpus is not None:
        message.num_cpus = info.num_cpus
    if info.system_ram_bytes is not None:
        message.system_ram_bytes = info.system_ram_bytes
    return message


def set_peer_identity_frame(pid: int, uid: int, hint: str, name: str) -> bytes:
    """The SetPeerIdentity frame a relay sends first on each connection it opens."""
    frame = IPCFrame(request_id=0)
    frame.set_peer_identity.pid = pid
    frame.set_peer_identity.uid = uid
    frame.set_peer_identity.machine_id_hint = hint
    frame.set_peer_identity.machine_name = name
    return encode_frame(frame)


def _listen(name: str) -> socket.socket:
    address = parse_address(name)
    sock = socket.socket(address.family, socket.SOCK_STREAM)
    try:
        if address.filesystem_path is not None:
            remove_stale_socket(address.filesystem_path)
        elif not address.is_unix:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address.sockaddr)
        sock.listen(socket.SOMAXCONN)
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        raise ServiceError(f"cannot listen on {name}: {exc.strerror or exc}") from exc
    return sock


def _peer_ids(sock: socket.socket | None) -> tuple[int, int]:
    """(pid, uid) of a UNIX socket's peer; upstream's invalid values on other sockets."""
    if sock is None or sock.family != socket.AF_UNIX:
        return _INVALID_PID_UID, _INVALID_PID_UID
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, _gid = struct.unpack("3i", creds)
    return pid, uid


async def _connect(name: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    address = parse_address(name)
    sock = socket.socket(address.family, socket.SOCK_STREAM)
    sock.setblocking(False)
    try:
        await asyncio.get_running_loop().sock_connect(sock, address.sockaddr)
    except OSError:
        sock.close()
        raise
    return await asyncio.open_connection(sock=sock)


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(_COPY_CHUNK):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


class RelayService:
    """Accepts producers on local sockets and relays each to the service at `remote`.

    Runs on the running asyncio loop. `hint` and `name` identify this machine to the remote
    service (its machine id is derived from `hint`).
    """

    def __init__(self, remote: str, *, hint: str, name: str) -> None:
        parse_address(remote)  # a bad name fails here, not at the first producer
        self.remote = remote
        self.hint = hint
        self.name = name
        self._servers: list[asyncio.Server] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self.relayed_connections = 0

    async def start(self, listen_names: Sequence[str]) -> None:
        """Listens on every local socket name."""
        for name in listen_names:
            sock = _listen(name)
            self._servers.append(await asyncio.start_server(self._on_producer, sock=sock))

    async def _on_producer(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        pid, uid = _peer_ids(writer.get_extra_info("socket"))
        try:
            remote_reader, remote_writer = await _connect(self.remote)
        except OSError as exc:
            _log.warning("traced_relay: cannot reach %s: %s", self.remote, exc)
            writer.close()
            return
        self.relayed_connections += 1
        remote_writer.write(set_peer_identity_frame(pid, uid, self.hint, self.name))
        up = asyncio.ensure_future(_copy(reader, remote_writer))
        down = asyncio.ensure_future(_copy(remote_reader, writer))
        for task in (up, down):
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        # Either side closing closes both: the peer of a closed side sees EOF.
        await asyncio.wait([up, down], return_when=asyncio.FIRST_COMPLETED)
        writer.close()
        remote_writer.close()

    async def close(self) -> None:
        """Stops listening and drops every relayed connection."""
        for server in self._servers:
            server.close()
        for task in list(self._tasks):
            task.cancel()
        for server in self._servers:
            with contextlib.suppress(Exception):
                await server.wait_closed()


class RelayClient:
    """This machine's RelayPort connection to the remote service: system info and clocks.

    Reconnects after a lost or failed connection (1 s, doubling up to 30 s). `on_synced`
    runs after each complete clock exchange (PING then UPDATE).
    """

    def __init__(
        self,
        remote: str,
        *,
        hint: str,
        name: str,
        system_info: SystemInfoProto,
        on_synced: Callable[[], None] | None = None,
        interval_s: float = CLOCK_SYNC_INTERVAL_S,
    ) -> None:
        self.remote = remote
        self._hint = hint
        self._name = name
        self._system_info = system_info
        self._on_synced = on_synced
        self._interval_s = interval_s
        self._client: AsyncClient | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._retry_delay_s = 1.0
        self._closed = False

    def start(self) -> None:
        """Connects (on the running loop)."""
        self._connect()

    def close(self) -> None:
        """Disconnects for good."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
        if self._client is not None:
            self._client.close()

    def _connect(self) -> None:
        if self._closed:
            return
        client = AsyncClient(
            self.remote, on_connect=self._on_connect, on_disconnect=self._on_disconnect
        )
        self._client = client
        client.connect()

    def _on_connect(self) -> None:
        client = self._client
        if client is None or client.connection is None:
            return
        client.connection.set_peer_identity(os.getpid(), os.geteuid(), self._hint, self._name)
        client.bind("RelayPort", self._on_bound)

    def _on_bound(self, proxy: ServiceProxy | None) -> None:
        client = self._client
        if proxy is None or client is None:
            _log.warning("traced_relay: %s does not serve RelayPort", self.remote)
            return
        self._retry_delay_s = 1.0
        request = pb.InitRelayRequest(system_info=self._system_info)
        try:
            client.invoke(proxy, "InitRelay", request, None)
        except WireError as exc:
            _log.debug("InitRelay not sent: %s", exc)
        self._sync(proxy, pb.SyncClockRequest.PING)

    def _sync(self, proxy: ServiceProxy, phase: pb.SyncClockRequest.Phase.ValueType) -> None:
        client = self._client
        if client is None or self._closed:
            return
        request = pb.SyncClockRequest(phase=phase)
        for clock_id, timestamp in capture_clock_snapshot():
            request.clocks.add(clock_id=clock_id, timestamp=timestamp)

        def on_reply(reply: Reply) -> None:
            if not reply.success:
                return
            if phase == pb.SyncClockRequest.PING:
                self._sync(proxy, pb.SyncClockRequest.UPDATE)
                return
            if self._on_synced is not None:
                self._on_synced()
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(
                self._interval_s, self._sync, proxy, pb.SyncClockRequest.PING
            )

        try:
            client.invoke(proxy, "SyncClock", request, on_reply)
        except WireError as exc:
            _log.debug("SyncClock not sent: %s", exc)

    def _on_disconnect(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self._closed:
            return
        if self._retry_delay_s == 1.0:  # once per run of failures, not at every retry
            _log.warning("traced_relay: lost or cannot reach %s; retrying", self.remote)
        delay, self._retry_delay_s = (
            self._retry_delay_s,
            min(self._retry_delay_s * 2, _MAX_RETRY_DELAY_S),
        )
        self._timer = asyncio.get_running_loop().call_later(delay, self._connect)
