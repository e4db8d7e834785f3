"""What the producer and consumer IPC proxies share: a connection with a bound port."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable

from google.protobuf.message import Message
from perfetto_wire import (
    Client,
    MethodNotAvailableError,
    Reply,
    ReplyCallback,
    ServiceProxy,
    WireError,
    parse_address,
)

__all__ = ["PortClient"]

_log = logging.getLogger("perfetto_service")

PortTask = Callable[[ServiceProxy], None]


class PortClient:
    """A connection to one service port, owned by a background IPC thread.

    Construction does nothing else: the IPC thread starts, connects and binds the port in
    `connect()`. Calls made before the port is ready (bound, and for producers initialized)
    wait in a queue and go out in order once it is; calls made after the connection is gone
    are dropped. `on_ready` and `on_lost` run on the IPC thread.
    """

    def __init__(
        self,
        socket_name: str,
        service_name: str,
        *,
        retry: bool,
        thread_name: str,
    ) -> None:
        self._address = parse_address(socket_name)  # a malformed name fails here
        self._socket_name = socket_name
        self._service_name = service_name
        self._retry = retry
        self._thread_name = thread_name
        self._proxy: ServiceProxy | None = None
        self._ready = False
        self._queue: list[tuple[PortTask, Callable[[], None] | None]] = []
        self._lost = False
        self._done_event = threading.Event()
        self._attempted = threading.Event()
        self._first_attempt_failed = False
        self._lock = threading.Lock()
        self._client: Client | None = None
        self._closed = False
        self._unposted: list[Callable[[], object]] = []

    def connect(self) -> None:
        """Starts the IPC thread, connects and binds the port (then, for producers, initializes).

        Separate from construction so that callbacks, which run on the IPC thread, never
        see an application that has not stored this object yet. Does nothing once closed.
        """
        with self._lock:
            if self._client is not None or self._closed:
                return
            client = Client(
                self._socket_name,
                retry=self._retry,
                on_connect=self._attempted.set,
                on_connect_failed=self._attempt_failed,
                on_disconnect=self._lose,
                thread_name=self._thread_name,
            )
            self._client = client
            for task in self._unposted:  # under the lock: before any task posted from now on
                client.post(task)
            self._unposted = []
            client.post(self._bind)

    @property
    def client(self) -> Client:
        """The wire client (its loop runs on the IPC thread); only after `connect()`."""
        client = self._client
        if client is None:
            raise WireError("the port client is not connected yet")
        return client

    @property
    def unix_socket(self) -> bool:
        """Whether the service's socket is AF_UNIX (a connection attempt is answered at once)."""
        return self._address.is_unix

    @property
    def connected(self) -> bool:
        """Whether the port is ready and the connection still up."""
        return self._ready and not self._lost

    def supports(self, method: str) -> bool:
        """Whether the bound service offers `method` (from the bind reply; False before it).

        A service older than this client lacks some methods: calling one of them is not an
        error, its reply callback gets a failed reply (and the call's documented fallback).
        """
        proxy = self._proxy
        return proxy is not None and proxy.has_method(method)

    def connection_gone(self) -> bool:
        """Whether the connection is closed or lost (already true while its calls are failed)."""
        client = self._client
        connection = None if client is None else client.async_client.connection
        return self._lost or connection is None or connection.closed

    def wait_connected(self, timeout: float | None = None) -> bool:
        """Waits until the port is ready or the connection failed; True if it is ready."""
        self._done_event.wait(timeout)
        return self.connected

    def first_attempt_failed(self, timeout: float | None = None) -> bool:
        """Waits until the first connection attempt has an outcome; True if nothing accepted it.

        False once it connected, and when it has no outcome within `timeout` (or the client
        closed first). With `retry`, the client goes on trying after a failed attempt.
        """
        self._attempted.wait(timeout)
        return self._first_attempt_failed

    def post(self, task: Callable[[], object]) -> bool:
        """Runs `task` on the IPC thread (once connected); False (and dropped) once closed."""
        with self._lock:
            client = self._client
            if client is None:
                if self._closed:
                    _log.debug("dropping a task posted after close")
                    return False
                self._unposted.append(task)
                return True
        try:
            client.post(task)
        except WireError:
            _log.debug("dropping a task posted after close")
            return False
        return True

    def run_on_port(self, task: PortTask) -> None:
        """Runs `task` with the port on the IPC thread once it is ready."""
        self.post(lambda: self._run_or_queue(task))

    def invoke(
        self,
        method: str,
        request: Message,
        on_reply: ReplyCallback | None = None,
        fd: int | None = None,
    ) -> None:
        """Invokes a method once the port is ready; without `on_reply` no reply is asked for.

        `fd` is duplicated at once, so the caller may close it when this returns.
        """
        own_fd = _dup(fd)

        def send(proxy: ServiceProxy) -> None:
            try:
                self.client.async_client.invoke(proxy, method, request, on_reply, fd=own_fd)
            except MethodNotAvailableError:
                _log.info("the tracing service does not offer %s (an older version)", method)
                if on_reply is not None:
                    _reject(on_reply)
            except WireError as exc:
                _log.debug("%s not sent: %s", method, exc)
                if on_reply is not None:
                    _reject(on_reply)
            finally:
                _close(own_fd)

        def drop() -> None:
            _close(own_fd)
            if on_reply is not None:
                _reject(on_reply)

        if not self.post(lambda: self._run_or_queue(send, drop)):
            drop()

    def close(self) -> None:
        """Closes the connection and stops the IPC thread."""
        with self._lock:
            self._closed = True
            client = self._client
            self._unposted = []
        if client is not None:
            client.close()
        self._done_event.set()
        self._attempted.set()

    # On the IPC thread.

    def _attempt_failed(self) -> None:
        if not self._attempted.is_set():
            self._first_attempt_failed = True
            self._attempted.set()

    def _bind(self) -> None:
        try:
            self.client.async_client.bind(self._service_name, self._on_bound)
        except WireError as exc:
            _log.debug("cannot bind %s: %s", self._service_name, exc)
            self._lose()

    def _on_bound(self, proxy: ServiceProxy | None) -> None:
        if proxy is None:
            self._lose()
            return
        self._proxy = proxy
        self._on_bound_port(proxy)

    def _on_bound_port(self, _proxy: ServiceProxy) -> None:
        """Called once the port is bound; marks it ready unless a subclass has more to do."""
        self._set_ready()

    def _set_ready(self) -> None:
        proxy = self._proxy
        if proxy is None:
            return
        self._ready = True
        queue, self._queue = self._queue, []
        for task, _drop in queue:
            task(proxy)
        self._done_event.set()
        self._on_ready()

    def _run_or_queue(self, task: PortTask, drop: Callable[[], None] | None = None) -> None:
        if self._lost:
            if drop is not None:
                drop()
            return
        if self._ready and self._proxy is not None:
            task(self._proxy)
        else:
            self._queue.append((task, drop))

    def _lose(self) -> None:
        if self._lost:
            return
        self._lost = True
        queue, self._queue = self._queue, []
        for _task, drop in queue:
            if drop is not None:
                drop()
        self._done_event.set()
        self._on_lost()

    def _on_ready(self) -> None:
        """The port is ready (hook for subclasses)."""

    def _on_lost(self) -> None:
        """The connection is gone or never came up (hook for subclasses)."""


def _dup(fd: int | None) -> int | None:
    return os.dup(fd) if fd is not None else None


def _close(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)


def _reject(on_reply: ReplyCallback) -> None:
    try:
        on_reply(Reply(success=False, has_more=False, message=None))
    except Exception:
        _log.exception("reply callback failed")
