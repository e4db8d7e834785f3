"""Serves a `Host` on listening sockets from an asyncio event loop."""

from __future__ import annotations

import asyncio
import logging
import socket

from perfetto_wire._errors import WireError
from perfetto_wire._framing import IPC_BUFFER_SIZE
from perfetto_wire._host import Host
from perfetto_wire._sockets import listen_socket, peer_credentials
from perfetto_wire._transport import SocketTransport

__all__ = ["DEFAULT_SEND_TIMEOUT", "HostServer"]

_log = logging.getLogger("perfetto_wire")

DEFAULT_SEND_TIMEOUT = 10.0
"""Seconds a reply may wait for a slow peer before its connection is shut down."""


class HostServer:
    """Accepts connections for a `Host` on any number of listening sockets.

    Everything runs on `loop` (the running loop by default): accepting, reading, dispatching
    to handlers and writing. Construct, `listen` and `close` on the loop's thread.
    """

    def __init__(
        self,
        host: Host,
        *,
        loop: asyncio.AbstractEventLoop | None = None,
        send_timeout: float = DEFAULT_SEND_TIMEOUT,
    ) -> None:
        if send_timeout <= 0:
            raise WireError(f"send_timeout must be positive, got {send_timeout}")
        self.host = host
        self._loop = loop if loop is not None else asyncio.get_running_loop()
        self._send_timeout = send_timeout
        self._listeners: list[socket.socket] = []
        self._transports: set[SocketTransport] = set()
        # One receive buffer serves every connection: reads never interleave on one loop.
        self._recv_view = memoryview(bytearray(IPC_BUFFER_SIZE))

    def listen(self, name: str) -> str:
        """Listens on a socket name (path, `@abstract`, `host:port`); returns the bound name.

        For TCP port 0 the returned name carries the port the kernel picked.
        """
        sock = listen_socket(name)
        return self.adopt_listening_socket(sock)

    def adopt_listening_socket(self, sock: socket.socket) -> str:
        """Serves on an already listening socket (e.g. one inherited from init)."""
        sock.setblocking(False)
        self._listeners.append(sock)
        self._loop.add_reader(sock.fileno(), self._on_acceptable, sock)
        return _socket_name(sock)

    @property
    def addresses(self) -> list[str]:
        """The names of the sockets being listened on."""
        return [_socket_name(sock) for sock in self._listeners]

    @property
    def connection_count(self) -> int:
        """Connections currently open."""
        return len(self._transports)

    def close(self) -> None:
        """Stops listening and drops every connection (disconnect callbacks run)."""
        for sock in self._listeners:
            self._loop.remove_reader(sock.fileno())
            sock.close()
        self._listeners.clear()
        for transport in list(self._transports):
            transport.lose("host shutting down")

    def _on_acceptable(self, listener: socket.socket) -> None:
        while True:
            try:
                sock, address = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                _log.warning("accept() failed: %s", exc)
                return
            self._adopt(sock, address)

    def _adopt(self, sock: socket.socket, address: object) -> None:
        sock.setblocking(False)
        transport = SocketTransport(
            self._loop,
            sock,
            send_timeout=self._send_timeout,
            recv_buffer=self._recv_view,
            on_closed=self._transports.discard,
        )
        self._transports.add(transport)
        if sock.family == socket.AF_UNIX:
            try:
                uid, pid = peer_credentials(sock)
            except OSError as exc:
                _log.warning("cannot read peer credentials: %s", exc)
                transport.close()
                return
            connection = self.host.connect(transport, uid=uid, pid=pid)
        else:
            if sock.family in (socket.AF_INET, socket.AF_INET6):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            connection = self.host.connect(transport, peer_address=_format_peer(address))
        transport.start(connection)


def _format_peer(address: object) -> str:
    if isinstance(address, tuple) and len(address) >= 2:
        host, port = address[0], address[1]
        return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"
    return str(address)


def _socket_name(sock: socket.socket) -> str:
    name = sock.getsockname()
    if sock.family == socket.AF_UNIX:
        if isinstance(name, bytes):
            return "@" + name[1:].decode(errors="replace")
        return str(name)
    return _format_peer(name)
