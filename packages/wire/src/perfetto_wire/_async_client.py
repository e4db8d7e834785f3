"""An IPC client on an asyncio event loop: connects (with retries) and drives a ClientConnection."""

from __future__ import annotations

import asyncio
import enum
import logging
import socket
from collections.abc import Callable
from typing import TypeVar

from google.protobuf.message import Message

from perfetto_wire._client import (
    BindCallback,
    ClientConnection,
    ConnectionClosedError,
    Reply,
    ReplyCallback,
    RequestRejectedError,
    ServiceProxy,
    run_callback,
)
from perfetto_wire._descriptors import ServiceDescriptor
from perfetto_wire._errors import WireError
from perfetto_wire._sockets import SocketAddress, connect_socket, parse_address
from perfetto_wire._transport import SocketTransport

__all__ = ["AsyncClient", "ServiceUnavailableError", "reconnect_delay"]

_log = logging.getLogger("perfetto_wire")

T = TypeVar("T")


class ServiceUnavailableError(WireError):
    """The service could not be bound: the host lacks it, or there is no connection."""


def reconnect_delay(attempt: int) -> float:
    """Upstream's backoff in seconds before connection attempt `attempt + 1`.

    One more second per failed attempt up to 10 s, then 30 s.
    """
    return float(attempt) if attempt <= 10 else 30.0


class _State(enum.Enum):
    IDLE = "idle"
    CONNECTING = "connecting"
    CONNECTED = "connected"
    CLOSED = "closed"


class AsyncClient:
    """A connection to an IPC host, owned by one asyncio loop; use it from that loop only.

    Binds requested before the connection is up are sent once it is. With `retry`, a host
    that is not there yet is tried again after `backoff(attempt)` seconds; without it, or once
    an established connection is lost, the client is closed for good (make a new one).
    `on_connect` runs when the connection comes up, `on_connect_failed` after each failed
    attempt (`connect_attempts` counts them), `on_disconnect` once when the client closes for
    good, after pending callbacks were rejected.
    """

    def __init__(
        self,
        name: str,
        *,
        loop: asyncio.AbstractEventLoop | None = None,
        retry: bool = False,
        backoff: Callable[[int], float] = reconnect_delay,
        on_connect: Callable[[], None] | None = None,
        on_connect_failed: Callable[[], None] | None = None,
        on_disconnect: Callable[[], None] | None = None,
    ) -> None:
        self._address: SocketAddress = parse_address(name)
        self._loop = loop if loop is not None else asyncio.get_running_loop()
        self._retry = retry
        self._backoff = backoff
        self._on_connect = on_connect
        self._on_connect_failed = on_connect_failed
        self._on_disconnect = on_disconnect
        self._state = _State.IDLE
        self._attempts = 0
        self._pending_sock: socket.socket | None = None
        self._retry_timer: asyncio.TimerHandle | None = None
        self._transport: SocketTransport | None = None
        self._connection: ClientConnection | None = None
        self._queued_binds: list[tuple[ServiceDescriptor | str, BindCallback]] = []

    @property
    def address(self) -> str:
        """The socket name this client connects to."""
        return self._address.name

    @property
    def connected(self) -> bool:
        """Whether the connection is up."""
        return self._state is _State.CONNECTED

    @property
    def closed(self) -> bool:
        """Whether the client is finished (closed, lost, or failed to connect)."""
        return self._state is _State.CLOSED

    @property
    def connection(self) -> ClientConnection | None:
        """The protocol core of the live connection, if any."""
        return self._connection

    @property
    def connect_attempts(self) -> int:
        """Failed connection attempts so far."""
        return self._attempts

    def connect(self) -> None:
        """Starts connecting; does nothing if already started."""
        if self._state is _State.IDLE:
            self._state = _State.CONNECTING
            self._try_connect()

    def bind(self, service: ServiceDescriptor | str, callback: BindCallback) -> None:
        """Binds a service; `callback` gets the `ServiceProxy` or None. Queued until connected."""
        if self._state is _State.CLOSED:
            raise ConnectionClosedError(f"cannot bind {service}: client closed")
        if self._connection is None:
            if isinstance(service, str):
                ServiceDescriptor.for_service(service)  # unknown names fail now, not later
            self._queued_binds.append((service, callback))
            self.connect()
            return
        self._connection.bind(service, callback)

    def invoke(
        self,
        service: ServiceProxy,
        method_name: str,
        request: Message,
        callback: ReplyCallback | None = None,
        *,
        fd: int | None = None,
    ) -> int:
        """Invokes a method (see `ClientConnection.invoke`); returns the request id."""
        if self._connection is None or self._state is not _State.CONNECTED:
            raise ConnectionClosedError(f"cannot invoke {method_name}: not connected")
        return self._connection.invoke(service, method_name, request, callback, fd=fd)

    async def bind_service(self, service: ServiceDescriptor | str) -> ServiceProxy:
        """Binds a service, waiting for the connection if needed."""
        future: asyncio.Future[ServiceProxy | None] = self._loop.create_future()
        self.bind(service, lambda proxy: _settle(future, proxy))
        proxy = await future
        if proxy is None:
            raise ServiceUnavailableError(f"cannot bind {service} on {self.address}")
        return proxy

    async def call(
        self,
        service: ServiceProxy,
        method_name: str,
        request: Message,
        *,
        fd: int | None = None,
        on_reply: ReplyCallback | None = None,
    ) -> Reply:
        """Invokes a method and returns its final reply; `on_reply` also sees streamed ones.

        Raises `RequestRejectedError` if the host answers success=false and
        `ConnectionClosedError` if the connection goes away first.
        """
        future: asyncio.Future[Reply] = self._loop.create_future()

        def deliver(reply: Reply) -> None:
            if on_reply is not None:
                on_reply(reply)
            if not reply.has_more:
                _settle(future, reply)

        self.invoke(service, method_name, request, deliver, fd=fd)
        reply = await future
        if not reply.success:
            if self._connection is None or self._connection.closed:
                raise ConnectionClosedError(f"{method_name}: connection lost")
            raise RequestRejectedError(f"{service.name}.{method_name} was rejected by the host")
        return reply

    def close(self) -> None:
        """Closes the connection; pending callbacks are rejected, `on_disconnect` does not run."""
        if self._state is _State.CLOSED:
            return
        self._on_disconnect = None
        self._finish()

    def _try_connect(self) -> None:
        self._retry_timer = None
        if self._state is not _State.CONNECTING:
            return
        try:
            sock, connected = connect_socket(self._address)
        except OSError as exc:
            self._connect_failed(exc.strerror or str(exc))
            return
        if connected:
            self._connected(sock)
            return
        self._pending_sock = sock
        self._loop.add_writer(sock.fileno(), self._on_connect_writable)

    def _on_connect_writable(self) -> None:
        sock = self._pending_sock
        if sock is None:
            return
        self._pending_sock = None
        self._loop.remove_writer(sock.fileno())
        error = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if error:
            sock.close()
            self._connect_failed(f"connect error {error}")
            return
        self._connected(sock)

    def _connect_failed(self, reason: str) -> None:
        self._attempts += 1
        _call_hook(self._on_connect_failed)
        if not self._retry:
            _log.debug("cannot connect to %s: %s", self.address, reason)
            self._finish()
            return
        delay = self._backoff(self._attempts)
        _log.debug("cannot connect to %s (%s), retrying in %.3f s", self.address, reason, delay)
        self._retry_timer = self._loop.call_later(delay, self._try_connect)

    def _connected(self, sock: socket.socket) -> None:
        self._state = _State.CONNECTED
        transport = SocketTransport(
            self._loop, sock, send_timeout=None, on_closed=self._on_transport_closed
        )
        connection = ClientConnection(transport)
        self._transport = transport
        self._connection = connection
        transport.start(connection)
        queued, self._queued_binds = self._queued_binds, []
        for service, callback in queued:
            connection.bind(service, callback)
        _call_hook(self._on_connect)

    def _on_transport_closed(self, _transport: SocketTransport) -> None:
        self._finish()

    def _finish(self) -> None:
        if self._state is _State.CLOSED:
            return
        self._state = _State.CLOSED
        if self._retry_timer is not None:
            self._retry_timer.cancel()
            self._retry_timer = None
        if self._pending_sock is not None:
            self._loop.remove_writer(self._pending_sock.fileno())
            self._pending_sock.close()
            self._pending_sock = None
        queued, self._queued_binds = self._queued_binds, []
        for _service, callback in queued:
            run_callback(callback, None)
        if self._connection is not None:
            self._connection.connection_lost()
        if self._transport is not None:
            self._transport.close()
        on_disconnect, self._on_disconnect = self._on_disconnect, None
        _call_hook(on_disconnect)


def _settle(future: asyncio.Future[T], value: T) -> None:
    if not future.done():
        future.set_result(value)


def _call_hook(hook: Callable[[], None] | None) -> None:
    if hook is None:
        return
    try:
        hook()
    except Exception:
        _log.exception("IPC client connection hook failed")
