"""Serves a `Host` on listening sockets from an asyncio event loop."""

from __future__ import annotations

import asyncio
import errno
import logging
import resource
import socket

from perfetto_wire._errors import WireError
from perfetto_wire._framing import IPC_BUFFER_SIZE
from perfetto_wire._host import Host
from perfetto_wire._sockets import listen_socket, peer_credentials
from perfetto_wire._transport import SocketTransport

__all__ = ["ACCEPT_BACKOFF", "DEFAULT_SEND_TIMEOUT", "HostServer"]

_log = logging.getLogger("perfetto_wire")

DEFAULT_SEND_TIMEOUT = 10.0
"""Seconds a reply may wait for a slow peer before its connection is shut down."""

ACCEPT_BACKOFF = 0.5
"""Seconds accepting pauses when the process is out of file descriptors or socket memory.

Accepting resumes earlier when one of this server's connections closes.
"""

_EXHAUSTED = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


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
        self._exhausted = False
        self._resume_timer: asyncio.TimerHandle | None = None
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
        self._pause_accepting()
        for sock in self._listeners:
            sock.close()
        self._listeners.clear()
        for transport in list(self._transports):
            transport.lose("host shutting down")

    def _on_acceptable(self, listener: socket.socket) -> None:
        while True:
            try:
                sock, address = listener.accept()
            except BlockingIOError:
                if self._exhausted:
                    self._exhausted = False
                    _log.warning(
                        "Accepted every waiting connection (%d open)", len(self._transports)
                    )
                return
            except InterruptedError:
                return
            except OSError as exc:
                if exc.errno in _EXHAUSTED:
                    self._back_off(exc)
                else:
                    _log.warning("accept() failed: %s", exc)
                return
            self._adopt(sock, address)

    def _back_off(self, exc: OSError) -> None:
        """Stops polling the listeners for `ACCEPT_BACKOFF` s.

        Logs once per episode, which ends when no connection is left waiting.

        A pending connection keeps a listener readable: polling on would spin the loop.
        """
        if not self._exhausted:
            self._exhausted = True
            soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
            _log.error(
                "accept() failed: %s (%d connections open, RLIMIT_NOFILE %d); new connections "
                "wait until one closes, retrying every %.1f s",
                exc.strerror or exc,
                len(self._transports),
                soft,
                ACCEPT_BACKOFF,
            )
        self._pause_accepting()
        self._resume_timer = self._loop.call_later(ACCEPT_BACKOFF, self._resume_accepting)

    def _pause_accepting(self) -> None:
        if self._resume_timer is not None:
            self._resume_timer.cancel()
            self._resume_timer = None
        for sock in self._listeners:
            self._loop.remove_reader(sock.fileno())

    def _resume_accepting(self) -> None:
        self._pause_accepting()
        for sock in self._listeners:
            self._loop.add_reader(sock.fileno(), self._on_acceptable, sock)

    def _on_transport_closed(self, transport: SocketTransport) -> None:
        self._transports.discard(transport)
        if self._resume_timer is not None:
            self._resume_accepting()

    def _adopt(self, sock: socket.socket, address: object) -> None:
        sock.setblocking(False)
        transport = SocketTransport(
            self._loop,
            sock,
            send_timeout=self._send_timeout,
            recv_buffer=self._recv_view,
            on_closed=self._on_transport_closed,
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
