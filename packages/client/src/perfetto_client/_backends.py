"""Backends: the in-process tracing service, and a system `traced` reached over its socket."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import sys
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

from perfetto_service import (
    AsyncioTaskRunner,
    ClientIdentity,
    ProducerEndpoint,
    TracingService,
    producer_socket_names,
)
from perfetto_smb import SharedMemoryArbiter

from perfetto_client._producer import DataSourceKind, TracingProducer

if TYPE_CHECKING:  # the IPC client loads for the SYSTEM backend only
    from perfetto_protos.common.commit_data_request_pb2 import CommitDataRequest
    from perfetto_service import ProducerIPCClient

__all__ = ["InProcessBackend", "SystemBackend"]

_log = logging.getLogger("perfetto_client")

T = TypeVar("T")

_TIMEOUT = 10.0
_SMB_SCRAPING_ENABLED = 1


def _producer_name() -> str:
    argv0 = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python"
    return f"perfetto_client.{argv0 or 'python'}.{os.getpid()}"


class InProcessBackend:
    """A TracingService running on an asyncio loop in a daemon thread of this process.

    The producer writes through an arbiter over the shared memory buffer the service creates,
    as upstream's in-process backend does; sessions connect consumers to the same service.
    """

    def __init__(
        self,
        kinds: Callable[[], Sequence[DataSourceKind]],
        *,
        shmem_size_hint_kb: int = 0,
    ) -> None:
        self._kinds = kinds
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="perfetto-service", daemon=True
        )
        self._thread.start()
        self.task_runner = AsyncioTaskRunner(self.loop)
        self.service: TracingService = self.call(
            lambda: TracingService(self.task_runner, smb_scraping_enabled=True)
        )
        self.producer = TracingProducer(self, _producer_name())
        self._arbiter: SharedMemoryArbiter | None = None
        self._arbiter_lock = threading.Lock()
        identity = ClientIdentity(os.getuid(), os.getpid())

        def connect() -> ProducerEndpoint:
            endpoint = self.service.connect_producer(
                self.producer,
                identity,
                self.producer.name,
                shm_size_hint_bytes=shmem_size_hint_kb * 1024,
                in_process=True,
                smb_scraping_mode=_SMB_SCRAPING_ENABLED,
                sdk_version="perfetto_client",
            )
            self.producer.endpoint = endpoint
            return endpoint

        self.endpoint = self.call(connect)

    @property
    def on_service_thread(self) -> bool:
        """Whether the caller runs on the service's thread."""
        return threading.current_thread() is self._thread

    def call(self, fn: Callable[[], T], timeout: float = _TIMEOUT) -> T:
        """Runs `fn` on the service thread and returns its result."""
        if threading.current_thread() is self._thread:
            return fn()
        future: concurrent.futures.Future[T] = concurrent.futures.Future()

        def run() -> None:
            try:
                future.set_result(fn())
            except BaseException as exc:
                future.set_exception(exc)

        self.loop.call_soon_threadsafe(run)
        return future.result(timeout)

    def post(self, fn: Callable[[], object]) -> None:
        """Runs `fn` on the service thread soon."""
        self.loop.call_soon_threadsafe(fn)

    # ProducerHost ------------------------------------------------------------------------

    def arbiter(self) -> SharedMemoryArbiter | None:
        """The arbiter over the SMB (created once the service set it up)."""
        arbiter = self._arbiter
        if arbiter is not None:
            return arbiter
        with self._arbiter_lock:  # threads starting to write at once share one arbiter
            if self._arbiter is None:
                self._arbiter = self._new_arbiter()
            return self._arbiter

    def _new_arbiter(self) -> SharedMemoryArbiter | None:
        shm = self.endpoint.shared_memory()
        if shm is None:
            return None
        endpoint = self.endpoint
        post = self.loop.call_soon_threadsafe

        def post_task(task: Callable[[], None]) -> None:
            post(task)

        def commit(request: CommitDataRequest, callback: Callable[[], None] | None) -> None:
            post(endpoint.commit_data, request, callback)

        def register_writer(writer_id: int, target_buffer: int) -> None:
            post(endpoint.register_trace_writer, writer_id, target_buffer)

        def unregister_writer(writer_id: int) -> None:
            post(endpoint.unregister_trace_writer, writer_id)

        return SharedMemoryArbiter(
            shm.buffer,
            endpoint.shared_buffer_page_size_kb() * 1024,
            commit,
            post_task=post_task,
            register_writer=register_writer,
            unregister_writer=unregister_writer,
            may_stall=lambda: not self.on_service_thread,
        )

    def on_producer_connected(self) -> None:
        """Nothing to do: the in-process service is always there."""

    def on_producer_disconnected(self) -> None:
        """The in-process service never goes away while the process lives."""

    def data_sources(self) -> Sequence[DataSourceKind]:
        """Every registered data source kind."""
        return self._kinds()

    def register(self, kind: DataSourceKind) -> None:
        """Registers a kind added after the backend started."""
        self.post(lambda: self.producer.register(kind))

    def update(self, kind: DataSourceKind) -> None:
        """Sends a kind's new descriptor."""
        self.post(lambda: self.producer.update(kind))

    def activate_triggers(self, names: Sequence[str]) -> None:
        """Fires triggers in the in-process service."""
        items = list(names)
        self.post(lambda: self.endpoint.activate_triggers(items))


class SystemBackend:
    """A producer connected to the system's `traced` (ours or upstream's) over its socket.

    A missing service is one log line, when the producer's first connection attempt on a UNIX
    socket finds nothing listening (unless `warn_missing` is False); the producer keeps
    trying, and reconnects whenever the service restarts. Its callbacks run on the IPC thread.
    """

    def __init__(
        self,
        kinds: Callable[[], Sequence[DataSourceKind]],
        *,
        shmem_size_hint_kb: int = 0,
        socket_name: str | None = None,
        warn_missing: bool = True,
    ) -> None:
        self._kinds = kinds
        self.socket_name = socket_name or producer_socket_names()[0]
        self._shm_hint = shmem_size_hint_kb * 1024
        self._lock = threading.Lock()
        self._closed = False
        self.connections = 0
        """How many times a producer connection was established (reconnects included)."""
        self.producer = TracingProducer(self, _producer_name(), adopts_startup=True)
        self.client: ProducerIPCClient | None = None
        self._connect()
        self.service_missing = self._first_attempt_failed()
        """Whether nothing listened on the UNIX socket at the first connection attempt."""
        if self.service_missing and warn_missing:
            _log.warning(
                "perfetto: no tracing service at %s yet; events go nowhere until it starts",
                self.socket_name,
            )

    def _first_attempt_failed(self) -> bool:
        # A UNIX socket's connect() has its answer at once; elsewhere it may take long, and the
        # producer does not wait for it (nor says anything).
        client = self.client
        if client is None or not client.unix_socket:
            return False
        return client.first_attempt_failed(_TIMEOUT)

    def _connect(self) -> None:
        # The IPC client loads with the first connection: 34 ms of CPU after _backends.
        from perfetto_service import ProducerIPCClient

        with self._lock:
            if self._closed:
                return
            producer = TracingProducer(self, self.producer.name, adopts_startup=True)
            self.producer = producer
            client = ProducerIPCClient(
                self.socket_name,
                producer,
                producer.name,
                shm_size_hint_bytes=self._shm_hint,
                smb_scraping_mode=_SMB_SCRAPING_ENABLED,
                sdk_version="perfetto_client",
                retry=True,
            )
            producer.endpoint = client
            self.client = client
        client.connect()

    def wait_connected(self, timeout: float = _TIMEOUT) -> bool:
        """Waits until a producer connection is up; True if it is."""
        client = self.client
        return client is not None and client.wait_connected(timeout) and self.producer.connected

    # ProducerHost ------------------------------------------------------------------------

    def on_producer_connected(self) -> None:
        """Counts established connections."""
        self.connections += 1

    def post(self, fn: Callable[[], object]) -> None:
        """The IPC client may be called from any thread: runs `fn` now."""
        fn()

    def arbiter(self) -> SharedMemoryArbiter | None:
        """The arbiter of the current connection, once the service set up the SMB."""
        client = self.client
        return client.arbiter if client is not None else None

    def on_producer_disconnected(self) -> None:
        """The service went away: connect again (retrying until it is back)."""
        old = self.client
        with self._lock:
            if self._closed:
                return

        def reconnect() -> None:
            if old is not None:
                old.close()
            self._connect()

        threading.Thread(target=reconnect, name="perfetto-reconnect", daemon=True).start()

    def data_sources(self) -> Sequence[DataSourceKind]:
        """Every registered data source kind."""
        return self._kinds()

    def register(self, kind: DataSourceKind) -> None:
        """Registers a kind added after the backend started."""
        client = self.client
        if client is not None:
            client.post(lambda: self.producer.register(kind))

    def update(self, kind: DataSourceKind) -> None:
        """Sends a kind's new descriptor."""
        client = self.client
        if client is not None:
            client.post(lambda: self.producer.update(kind))

    def activate_triggers(self, names: Sequence[str]) -> None:
        """Fires triggers in the system service."""
        client = self.client
        if client is not None:
            client.activate_triggers(list(names))

    def close(self) -> None:
        """Disconnects for good."""
        with self._lock:
            self._closed = True
            client = self.client
        if client is not None:
            client.close()
