"""The ProducerPort IPC service: maps a producer socket's RPCs onto the tracing service.

One `RemoteProducer` per connection implements `Producer` for the service by streaming
GetAsyncCommandResponse items over the producer's long-lived GetAsyncCommand call (commands
issued before that call arrives wait in a queue), and forwards the producer's RPCs to its
`ProducerEndpoint`. Producers are untrusted: every call before a successful
InitializeConnection is rejected, and so is a second InitializeConnection.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from google.protobuf.message import Message
from perfetto_protos.config.data_source_config_pb2 import DataSourceConfig
from perfetto_protos.ipc import producer_port_pb2 as pb
from perfetto_smb import SharedMemory, SmbError
from perfetto_wire import ClientInfo, Deferred, Host, ServiceDescriptor, WireError

from perfetto_service._errors import ServiceError
from perfetto_service._interfaces import ClientIdentity, Producer, ProducerEndpoint
from perfetto_service.core._chunk_mover import Buffer, commit_data_request
from perfetto_service.ipc.service._producer_commands import (
    clear_incremental_state_command,
    flush_command,
    initialize_connection_response,
    setup_data_source_command,
    setup_tracing_command,
    start_data_source_command,
    stop_data_source_command,
)

__all__ = ["PortEndpoint", "ProducerConnector", "ProducerPort", "RemoteProducer"]

_SETUP_TRACING = "setup_tracing"

_log = logging.getLogger("perfetto_service")


class ProducerConnector(Protocol):
    """The part of the tracing service the producer port needs."""

    def connect_producer(
        self,
        producer: Producer,
        identity: ClientIdentity,
        name: str,
        *,
        shm_size_hint_bytes: int = 0,
        in_process: bool = False,
        smb_scraping_mode: int = 0,
        shm_page_size_hint_bytes: int = 0,
        shm: SharedMemory | None = None,
        sdk_version: str = "",
    ) -> PortEndpoint | None:
        """Connects a producer; None, or `ServiceError`, if the service refuses it."""


class PortEndpoint(ProducerEndpoint, Protocol):
    """A `ProducerEndpoint` that also takes CommitData serialized."""

    def commit_data_bytes(
        self, request: Buffer, callback: Callable[[], None] | None = None
    ) -> None:
        """`commit_data` for a serialized request as `commit_data_request` returns it."""


class RemoteProducer:
    """The service's view of one producer on the other end of a socket."""

    def __init__(
        self,
        client: ClientInfo,
        post: Callable[[Callable[[], None]], object],
        *,
        shmem_emulation: bool = False,
    ) -> None:
        self.client = client
        self.shmem_emulation = shmem_emulation
        self.endpoint: PortEndpoint | None = None
        self.provided_shm: SharedMemory | None = None
        self._post = post
        self._commands: Deferred | None = None
        self._queued: list[tuple[str, bytes | None]] = []
        self._send_posted = False
        self.disconnected = False
        self.drop_connection: Callable[[], None] | None = None
        """Closes the producer's socket (set by the port)."""

    # Producer callbacks (from the service).

    def on_connect(self) -> None:
        """Nothing to send: the InitializeConnection reply already went out."""

    def on_disconnect(self) -> None:
        """The service dropped the producer: its connection is closed too."""
        self.disconnected = True
        if self.drop_connection is not None:
            self.drop_connection()

    def on_tracing_setup(self) -> None:
        """Sends SetupTracing, with the SMB's fd unless the producer provided the SMB."""
        self._send(_SETUP_TRACING, None)

    def setup_data_source(self, instance_id: int, config: DataSourceConfig) -> None:
        """Sends SetupDataSource."""
        self._send("setup_data_source", setup_data_source_command(instance_id, config))

    def start_data_source(self, instance_id: int, config: DataSourceConfig) -> None:
        """Sends StartDataSource."""
        self._send("start_data_source", start_data_source_command(instance_id, config))

    def stop_data_source(self, instance_id: int) -> None:
        """Sends StopDataSource."""
        self._send("stop_data_source", stop_data_source_command(instance_id))

    def flush(self, request_id: int, instance_ids: Sequence[int], flags: int) -> None:
        """Sends Flush."""
        self._send("flush", flush_command(request_id, instance_ids, flags))

    def clear_incremental_state(self, instance_ids: Sequence[int]) -> None:
        """Sends ClearIncrementalState."""
        self._send("clear_incremental_state", clear_incremental_state_command(instance_ids))

    # The command stream.

    def bind_commands(self, deferred: Deferred) -> None:
        """Adopts the GetAsyncCommand call and sends what was queued for it."""
        if self._commands is not None and not self._commands.done:
            self._commands.reject()
        self._commands = deferred
        self._send_queued()

    def _send(self, name: str, command: bytes | None) -> None:
        """Queues the serialized command `name` (None: SetupTracing, made when it is sent).

        The commands queued while the loop runs its ready tasks leave together, in one write,
        once those tasks ran: a producer reads, say, SetupDataSource and StartDataSource at
        once, as it does from upstream's service (an SDK enables its categories on the first
        and writes only after the second).
        """
        if self.disconnected:
            return
        self._queued.append((name, command))
        if self._commands is not None and not self._send_posted:
            self._send_posted = True
            self._post(self._send_queued)

    def _send_queued(self) -> None:
        """Sends the queued commands on the GetAsyncCommand call in one write; a SetupTracing
        that passes the SMB's fd goes in a write of its own (a reader gives the fd received
        with a write to the last frame of that write)."""
        self._send_posted = False
        deferred = self._commands
        if deferred is None or self.disconnected or deferred.done or not self._queued:
            return
        queued, self._queued = self._queued, []
        replies: list[bytes] = []
        try:
            for _, command in queued:
                if command is not None:
                    replies.append(command)
                    continue
                setup_tracing, fd = self._setup_tracing()
                if fd is None:
                    replies.append(setup_tracing)
                    continue
                deferred.stream_serialized(replies)
                deferred.stream_serialized([setup_tracing], fd=fd)
                replies = []
            deferred.stream_serialized(replies)
        except WireError as exc:
            # The command stream is dead (e.g. a config too big for one frame).
            _log.warning("cannot send commands to the producer: %s", exc)
            if self.drop_connection is not None:
                self.drop_connection()

    def _setup_tracing(self) -> tuple[bytes, int | None]:
        """SetupTracing and the fd to send with it: the SMB's page size and fd, unless the
        producer provided the SMB."""
        endpoint = self.endpoint
        shm = None if endpoint is None else endpoint.shared_memory()
        if endpoint is None or shm is None or shm is self.provided_shm:
            return setup_tracing_command(None), None
        command = setup_tracing_command(endpoint.shared_buffer_page_size_kb())
        return command, None if self.shmem_emulation else shm.fd

    def close(self) -> None:
        """The socket is gone: leaves the service."""
        self.disconnected = True
        self._queued.clear()
        if self.endpoint is not None:
            endpoint, self.endpoint = self.endpoint, None
            endpoint.disconnect()


def _resolve_empty(deferred: Deferred) -> None:
    """Answers with the method's reply message, which has no fields: no bytes."""
    if deferred.wants_reply and not deferred.done:
        deferred.resolve_serialized(b"")


class ProducerPort:
    """The handlers of the ProducerPort service, one `RemoteProducer` per connection.

    With `shmem_emulation` (sockets that cannot pass file descriptors) producers are told to
    send their chunks inside CommitData, and SetupTracing carries no fd.
    """

    descriptor = ServiceDescriptor.for_service("ProducerPort")

    def __init__(
        self,
        service: ProducerConnector,
        post: Callable[[Callable[[], None]], object],
        *,
        shmem_emulation: bool = False,
    ) -> None:
        self._service = service
        self._post = post
        self.shmem_emulation = shmem_emulation
        self._producers: dict[int, RemoteProducer] = {}
        self._hosts: list[Host] = []

    def expose_on(self, host: Host) -> None:
        """Exposes the service on `host` (call `on_client_disconnected` from the host's hook)."""
        host.expose_service(self.descriptor, self._handlers(), {"CommitData": commit_data_request})
        self._hosts.append(host)

    @property
    def producers(self) -> list[RemoteProducer]:
        """The producers whose connection is initialized."""
        return list(self._producers.values())

    def _drop(self, client_id: int) -> None:
        for host in self._hosts:
            host.disconnect(client_id, "the tracing service dropped the producer")

    def on_client_disconnected(self, client: ClientInfo) -> None:
        """Forgets a connection's producer and disconnects it from the service."""
        producer = self._producers.pop(client.client_id, None)
        if producer is not None:
            producer.close()

    def _handlers(self) -> dict[str, Callable[[Message, Deferred], Message | None]]:
        def wrap(
            call: Callable[[RemoteProducer, PortEndpoint, Any, Deferred], None],
        ) -> Callable[[Message, Deferred], Message | None]:
            def handler(request: Message, deferred: Deferred) -> None:
                producer = self._producers.get(deferred.client.client_id)
                if producer is None or producer.endpoint is None:
                    _log.debug("%s before InitializeConnection", deferred.method.name)
                    deferred.reject()
                    return
                call(producer, producer.endpoint, request, deferred)

            return handler

        return {
            "InitializeConnection": self._initialize_connection,
            "RegisterDataSource": wrap(_register_data_source),
            "UnregisterDataSource": wrap(_unregister_data_source),
            "UpdateDataSource": wrap(_update_data_source),
            "CommitData": wrap(_commit_data),
            "GetAsyncCommand": wrap(_get_async_command),
            "RegisterTraceWriter": wrap(_register_trace_writer),
            "UnregisterTraceWriter": wrap(_unregister_trace_writer),
            "NotifyDataSourceStarted": wrap(_notify_started),
            "NotifyDataSourceStopped": wrap(_notify_stopped),
            "ActivateTriggers": wrap(_activate_triggers),
            "Sync": wrap(_sync),
        }

    def _initialize_connection(self, request: Message, deferred: Deferred) -> None:
        if not isinstance(request, pb.InitializeConnectionRequest):
            deferred.reject()
            return
        client = deferred.client
        received_fd = deferred.take_received_fd()
        if client.client_id in self._producers:
            _log.debug("client %d initialized its connection twice", client.client_id)
            if received_fd is not None:
                os.close(received_fd)
            deferred.reject()
            return
        shm: SharedMemory | None = None
        if request.producer_provided_shmem and received_fd is not None and not self.shmem_emulation:
            try:
                shm = SharedMemory.attach(received_fd)
            except SmbError as exc:
                _log.warning("cannot map the SMB of producer %r: %s", request.producer_name, exc)
            else:
                if not shm.sealed:
                    _log.warning("producer %r sent an unsealed SMB", request.producer_name)
                    shm.close()
                    shm = None
        elif received_fd is not None:
            os.close(received_fd)
        producer = RemoteProducer(client, self._post, shmem_emulation=self.shmem_emulation)
        producer.drop_connection = lambda: self._drop(client.client_id)
        producer.provided_shm = shm
        identity = ClientIdentity(client.uid, client.pid, client.machine_id, client.machine_name)
        try:
            endpoint = self._service.connect_producer(
                producer,
                identity,
                request.producer_name,
                shm_size_hint_bytes=request.shared_memory_size_hint_bytes,
                smb_scraping_mode=request.smb_scraping_mode,
                shm_page_size_hint_bytes=request.shared_memory_page_size_hint_bytes,
                shm=shm,
                sdk_version=request.sdk_version,
            )
        except ServiceError as exc:
            _log.info("producer %r refused: %s", request.producer_name, exc)
            endpoint = None
        if endpoint is None:
            if shm is not None and not shm.closed:
                shm.close()
            deferred.reject()
            return
        producer.endpoint = endpoint
        self._producers[client.client_id] = producer
        using_provided = shm is not None and endpoint.shared_memory() is shm
        if shm is not None and not using_provided:
            producer.provided_shm = None
        deferred.resolve_serialized(
            initialize_connection_response(
                using_shmem_provided_by_producer=using_provided,
                use_shmem_emulation=self.shmem_emulation,
            )
        )


def _register_data_source(
    _producer: RemoteProducer,
    endpoint: ProducerEndpoint,
    request: pb.RegisterDataSourceRequest,
    deferred: Deferred,
) -> None:
    endpoint.register_data_source(request.data_source_descriptor)
    _resolve_empty(deferred)


def _unregister_data_source(
    _producer: RemoteProducer,
    endpoint: ProducerEndpoint,
    request: pb.UnregisterDataSourceRequest,
    deferred: Deferred,
) -> None:
    endpoint.unregister_data_source(request.data_source_name)
    _resolve_empty(deferred)


def _update_data_source(
    _producer: RemoteProducer,
    endpoint: ProducerEndpoint,
    request: pb.UpdateDataSourceRequest,
    deferred: Deferred,
) -> None:
    endpoint.update_data_source(request.data_source_descriptor)
    _resolve_empty(deferred)


def _commit_data(
    _producer: RemoteProducer,
    endpoint: PortEndpoint,
    request: Buffer,
    deferred: Deferred,
) -> None:
    callback = (lambda: _resolve_empty(deferred)) if deferred.wants_reply else None
    endpoint.commit_data_bytes(request, callback)


def _get_async_command(
    producer: RemoteProducer, _endpoint: ProducerEndpoint, _request: Message, deferred: Deferred
) -> None:
    producer.bind_commands(deferred)


def _register_trace_writer(
    _producer: RemoteProducer,
    endpoint: ProducerEndpoint,
    request: pb.RegisterTraceWriterRequest,
    deferred: Deferred,
) -> None:
    endpoint.register_trace_writer(request.trace_writer_id, request.target_buffer)
    _resolve_empty(deferred)


def _unregister_trace_writer(
    _producer: RemoteProducer,
    endpoint: ProducerEndpoint,
    request: pb.UnregisterTraceWriterRequest,
    deferred: Deferred,
) -> None:
    endpoint.unregister_trace_writer(request.trace_writer_id)
    _resolve_empty(deferred)


def _notify_started(
    _producer: RemoteProducer,
    endpoint: ProducerEndpoint,
    request: pb.NotifyDataSourceStartedRequest,
    deferred: Deferred,
) -> None:
    endpoint.notify_data_source_started(request.data_source_id)
    _resolve_empty(deferred)


def _notify_stopped(
    _producer: RemoteProducer,
    endpoint: ProducerEndpoint,
    request: pb.NotifyDataSourceStoppedRequest,
    deferred: Deferred,
) -> None:
    endpoint.notify_data_source_stopped(request.data_source_id)
    _resolve_empty(deferred)


def _activate_triggers(
    _producer: RemoteProducer,
    endpoint: ProducerEndpoint,
    request: pb.ActivateTriggersRequest,
    deferred: Deferred,
) -> None:
    endpoint.activate_triggers(list(request.trigger_names))
    _resolve_empty(deferred)


def _sync(
    _producer: RemoteProducer, endpoint: ProducerEndpoint, _request: Message, deferred: Deferred
) -> None:
    endpoint.sync(lambda: _resolve_empty(deferred))
