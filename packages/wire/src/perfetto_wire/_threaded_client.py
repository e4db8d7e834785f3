"""An IPC client for code that does not run asyncio: one background thread owns the socket."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from types import TracebackType
from typing import TypeVar

from google.protobuf.message import Message

from perfetto_wire._async_client import AsyncClient, ServiceUnavailableError, reconnect_delay
from perfetto_wire._client import (
    ConnectionClosedError,
    Reply,
    ReplyCallback,
    RequestRejectedError,
    ServiceProxy,
    run_callback,
)
from perfetto_wire._descriptors import ServiceDescriptor
from perfetto_wire._errors import WireError

__all__ = ["Client"]

_log = logging.getLogger("perfetto_wire")

T = TypeVar("T")


class Client:
    """A connection to an IPC host whose socket lives on a private background thread.

    Every method may be called from any thread; results come back as
    `concurrent.futures.Future`s, and stream callbacks run on the IPC thread (where
    `async_client` may be used directly). See `AsyncClient` for `retry`, `backoff` and the hooks.
    """

    def __init__(
        self,
        name: str,
        *,
        retry: bool = False,
        backoff: Callable[[int], float] = reconnect_delay,
        on_connect: Callable[[], None] | None = None,
        on_connect_failed: Callable[[], None] | None = None,
        on_disconnect: Callable[[], None] | None = None,
        thread_name: str = "perfetto-ipc",
    ) -> None:
        self._loop = asyncio.new_event_loop()
        try:
            self._async_client = AsyncClient(
                name,
                loop=self._loop,
                retry=retry,
                backoff=backoff,
                on_connect=on_connect,
                on_connect_failed=on_connect_failed,
                on_disconnect=on_disconnect,
            )
        except BaseException:
            self._loop.close()
            raise
        self._closing = False
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=thread_name, daemon=True)
        self._thread.start()
        self.post(self._async_client.connect)

    @property
    def async_client(self) -> AsyncClient:
        """The loop-side client; use it only from the IPC thread (e.g. inside callbacks)."""
        return self._async_client

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The event loop running on the IPC thread."""
        return self._loop

    @property
    def connected(self) -> bool:
        """Whether the connection is up (a snapshot: it may change right after)."""
        return self._async_client.connected

    def post(self, task: Callable[[], object]) -> None:
        """Runs `task` on the IPC thread."""
        with self._lock:
            if self._closing:
                raise ConnectionClosedError("the client is closed")
            self._loop.call_soon_threadsafe(task)

    def bind(self, service: ServiceDescriptor | str) -> Future[ServiceProxy]:
        """Binds a service once connected; fails with `ServiceUnavailableError` if impossible."""
        future: Future[ServiceProxy] = Future()

        def on_bound(proxy: ServiceProxy | None) -> None:
            if proxy is None:
                _fail(future, ServiceUnavailableError(f"cannot bind {service}"))
            else:
                _resolve(future, proxy)

        def start() -> None:
            try:
                self._async_client.bind(service, on_bound)
            except ConnectionClosedError as exc:
                _fail(future, ServiceUnavailableError(f"cannot bind {service}: {exc}"))
            except WireError as exc:
                _fail(future, exc)

        self._post_or_fail(start, future)
        return future

    def invoke(
        self,
        service: ServiceProxy,
        method_name: str,
        request: Message,
        *,
        fd: int | None = None,
        on_reply: ReplyCallback | None = None,
    ) -> Future[Reply]:
        """Invokes a method; the future gets the final reply, `on_reply` every reply.

        The future fails with `RequestRejectedError` on success=false,
        `MethodNotAvailableError` when the host lacks the method (nothing is sent) and
        `ConnectionClosedError` when the connection goes away. `fd` is duplicated before
        this returns, so the caller may close it at once.
        """
        future: Future[Reply] = Future()
        own_fd = os.dup(fd) if fd is not None else None
        async_client = self._async_client

        def deliver(reply: Reply) -> None:
            if on_reply is not None:
                run_callback(on_reply, reply)
            if reply.has_more:
                return
            if reply.success:
                _resolve(future, reply)
            elif async_client.connection is None or async_client.connection.closed:
                _fail(future, ConnectionClosedError(f"{method_name}: connection lost"))
            else:
                _fail(future, RequestRejectedError(f"{service.name}.{method_name} was rejected"))

        def start() -> None:
            try:
                self._async_client.invoke(service, method_name, request, deliver, fd=own_fd)
            except WireError as exc:
                _fail(future, exc)
            finally:
                if own_fd is not None:
                    os.close(own_fd)

        try:
            self.post(start)
        except ConnectionClosedError as exc:
            if own_fd is not None:
                os.close(own_fd)
            _fail(future, exc)
        return future

    def invoke_oneway(
        self,
        service: ServiceProxy,
        method_name: str,
        request: Message,
        *,
        fd: int | None = None,
    ) -> Future[None]:
        """Invokes a method asking for no reply (drop_reply); the future completes once sent."""
        future: Future[None] = Future()
        own_fd = os.dup(fd) if fd is not None else None

        def start() -> None:
            try:
                self._async_client.invoke(service, method_name, request, None, fd=own_fd)
            except WireError as exc:
                _fail(future, exc)
            else:
                _resolve(future, None)
            finally:
                if own_fd is not None:
                    os.close(own_fd)

        try:
            self.post(start)
        except ConnectionClosedError as exc:
            if own_fd is not None:
                os.close(own_fd)
            _fail(future, exc)
        return future

    def close(self, timeout: float = 5.0) -> None:
        """Closes the connection (pending futures fail) and stops the IPC thread."""
        with self._lock:
            if self._closing:
                return
            self._closing = True
            self._loop.call_soon_threadsafe(self._shutdown)
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _post_or_fail(self, task: Callable[[], None], future: Future[T]) -> None:
        try:
            self.post(task)
        except ConnectionClosedError as exc:
            _fail(future, exc)

    def _shutdown(self) -> None:
        self._async_client.close()
        self._loop.stop()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_forever()
        finally:
            self._loop.close()


def _resolve(future: Future[T], value: T) -> None:
    try:
        future.set_result(value)
    except InvalidStateError:
        _log.debug("dropping a result for a cancelled future")


def _fail(future: Future[T], error: BaseException) -> None:
    try:
        future.set_exception(error)
    except InvalidStateError:
        _log.debug("dropping an error for a cancelled future")
