"""A producer's connection to a tracing service over a producer socket (upstream's ext tier).

`ProducerIPCClient` implements `ProducerEndpoint` by invoking ProducerPort methods, runs the
GetAsyncCommand stream that drives the application's `Producer`, maps the shared memory
buffer the service sends with SetupTracing and runs a `SharedMemoryArbiter` over it, whose
commits go out as CommitData. `Producer` callbacks run on the client's IPC thread: write trace
data from other threads (a writer that stalls on a full buffer waits for that thread).
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Sequence

from perfetto_protos.common.commit_data_request_pb2 import CommitDataRequest
from perfetto_protos.common.data_source_descriptor_pb2 import DataSourceDescriptor
from perfetto_protos.ipc import producer_port_pb2 as pb
from perfetto_smb import (
    BufferExhaustedPolicy,
    SharedMemory,
    SharedMemoryArbiter,
    SmbError,
    TraceWriter,
)
from perfetto_wire import Reply, ServiceProxy

from perfetto_service._errors import ServiceError
from perfetto_service._interfaces import Producer, acks_flush_itself
from perfetto_service._version import service_version
from perfetto_service.ipc._client_base import PortClient

__all__ = [
    "SHMEM_EMULATION_SIZE",
    "SMB_SCRAPING_DEFAULT",
    "SMB_SCRAPING_DISABLED",
    "SMB_SCRAPING_ENABLED",
    "ProducerIPCClient",
    "default_sdk_version",
]

_log = logging.getLogger("perfetto_service")

SHMEM_EMULATION_SIZE = 1024 * 1024
"""Bytes of the in-process buffer used when the socket cannot carry shared memory."""

_DEFAULT_PAGE_SIZE_KB = 4

SMB_SCRAPING_DEFAULT = 0
"""Leave SMB scraping to the service's default (the field is not sent)."""
SMB_SCRAPING_ENABLED = 1
"""The service may read uncommitted chunks of this producer at a flush (upstream's SDK sets it)."""
SMB_SCRAPING_DISABLED = 2


@functools.cache
def default_sdk_version() -> str:
    """What a producer reports as InitializeConnectionRequest.sdk_version unless told."""
    return f"perfetto-py {service_version()}"


class ProducerIPCClient(PortClient):
    """A `ProducerEndpoint` that talks to a tracing service over a producer socket.

    After `connect()`, connects to `socket_name` (with `retry`, until a service appears), binds
    ProducerPort and initializes the connection as `name` with the given hints. With `producer_shm`
    the producer offers its own shared memory buffer (a sealed memfd), which the service may adopt.
    As upstream's SDK, it reports `sdk_version` and lets the service scrape its buffer at a flush
    (`smb_scraping_mode`; `SMB_SCRAPING_DEFAULT` leaves it to the service). Methods may be
    called from any thread; calls made before the connection is initialized are sent once it is.
    """

    def __init__(
        self,
        socket_name: str,
        producer: Producer,
        name: str,
        *,
        shm_size_hint_bytes: int = 0,
        shm_page_size_hint_bytes: int = 0,
        smb_scraping_mode: int = SMB_SCRAPING_ENABLED,
        producer_shm: SharedMemory | None = None,
        sdk_version: str | None = None,
        retry: bool = False,
    ) -> None:
        self.producer = producer
        self.name = name
        # Fields set as upstream's client sets them: the hints always, the scraping mode only
        # when it is not the service's default, the SMB flag only with an SMB.
        self._request = pb.InitializeConnectionRequest(
            producer_name=name,
            shared_memory_size_hint_bytes=shm_size_hint_bytes,
            shared_memory_page_size_hint_bytes=shm_page_size_hint_bytes,
            sdk_version=default_sdk_version() if sdk_version is None else sdk_version,
        )
        if smb_scraping_mode != SMB_SCRAPING_DEFAULT:
            self._request.smb_scraping_mode = smb_scraping_mode  # type: ignore[assignment]
        if producer_shm is not None:
            self._request.producer_provided_shmem = True
        self._producer_shm = producer_shm
        self._shm: SharedMemory | None = None
        self._page_size_kb = 0
        self._arbiter: SharedMemoryArbiter | None = None
        self._emulation = False
        self._setup_ids: set[int] = set()
        self._disconnect_reported = False
        super().__init__(socket_name, "ProducerPort", retry=retry, thread_name="perfetto-producer")

    # ProducerEndpoint.

    def disconnect(self) -> None:
        """Closes the connection; the producer's `on_disconnect` runs once."""
        self.close()
        self._report_disconnect()

    def register_data_source(self, descriptor: DataSourceDescriptor) -> None:
        """Sends RegisterDataSource."""
        request = pb.RegisterDataSourceRequest(data_source_descriptor=descriptor)
        self.invoke("RegisterDataSource", request, _log_refusal(descriptor.name))

    def update_data_source(self, descriptor: DataSourceDescriptor) -> None:
        """Sends UpdateDataSource."""
        request = pb.UpdateDataSourceRequest(data_source_descriptor=descriptor)
        self.invoke("UpdateDataSource", request, _log_refusal(descriptor.name))

    def unregister_data_source(self, name: str) -> None:
        """Sends UnregisterDataSource."""
        self.invoke("UnregisterDataSource", pb.UnregisterDataSourceRequest(data_source_name=name))

    def register_trace_writer(self, writer_id: int, target_buffer: int) -> None:
        """Sends RegisterTraceWriter."""
        self.invoke(
            "RegisterTraceWriter",
            pb.RegisterTraceWriterRequest(trace_writer_id=writer_id, target_buffer=target_buffer),
        )

    def unregister_trace_writer(self, writer_id: int) -> None:
        """Sends UnregisterTraceWriter."""
        self.invoke(
            "UnregisterTraceWriter", pb.UnregisterTraceWriterRequest(trace_writer_id=writer_id)
        )

    def commit_data(
        self, request: CommitDataRequest, callback: Callable[[], None] | None = None
    ) -> None:
        """Sends CommitData; `callback` runs on the IPC thread once the service has it."""
        on_reply = None
        if callback is not None:
            done = callback

            def on_reply(reply: Reply) -> None:
                if reply.success and not reply.has_more:
                    done()

        self.invoke("CommitData", request, on_reply)

    def shared_memory(self) -> SharedMemory | None:
        """The shared memory buffer, once tracing was set up (None in emulation mode)."""
        return self._shm

    def shared_buffer_page_size_kb(self) -> int:
        """The SMB's page size in KiB (0 before setup)."""
        return self._page_size_kb

    def notify_flush_complete(self, request_id: int) -> None:
        """Acks a flush: CommitData with `flush_request_id`, after any pending chunks."""
        arbiter = self._arbiter
        if arbiter is not None:
            arbiter.notify_flush_complete(request_id)
        else:
            self.commit_data(CommitDataRequest(flush_request_id=request_id))

    def notify_data_source_started(self, instance_id: int) -> None:
        """Sends NotifyDataSourceStarted."""
        self.invoke(
            "NotifyDataSourceStarted", pb.NotifyDataSourceStartedRequest(data_source_id=instance_id)
        )

    def notify_data_source_stopped(self, instance_id: int) -> None:
        """Sends NotifyDataSourceStopped."""
        self.invoke(
            "NotifyDataSourceStopped", pb.NotifyDataSourceStoppedRequest(data_source_id=instance_id)
        )

    def activate_triggers(self, names: Sequence[str]) -> None:
        """Sends ActivateTriggers."""
        self.invoke("ActivateTriggers", pb.ActivateTriggersRequest(trigger_names=list(names)))

    def sync(self, callback: Callable[[], None]) -> None:
        """Sends Sync; `callback` runs on the IPC thread when the service answers."""

        def on_reply(reply: Reply) -> None:
            if not reply.has_more:
                callback()

        self.invoke("Sync", pb.SyncRequest(), on_reply)

    # Writing.

    @property
    def arbiter(self) -> SharedMemoryArbiter | None:
        """The arbiter over the shared memory buffer, once tracing was set up."""
        return self._arbiter

    def create_trace_writer(
        self, target_buffer: int, policy: BufferExhaustedPolicy = BufferExhaustedPolicy.STALL
    ) -> TraceWriter:
        """A new TraceWriter for the session buffer `target_buffer` (from the DataSourceConfig).

        Raises `ServiceError` before tracing is set up (see `Producer.on_tracing_setup`).
        """
        arbiter = self._arbiter
        if arbiter is None:
            raise ServiceError("tracing is not set up yet: no shared memory buffer")
        try:
            return arbiter.create_trace_writer(target_buffer, policy)
        except SmbError as exc:
            raise ServiceError(str(exc)) from exc

    # The connection, on the IPC thread.

    def _on_bound_port(self, proxy: ServiceProxy) -> None:
        # As upstream: the command stream is asked for right behind InitializeConnection.
        fd = self._producer_shm.fd if self._producer_shm is not None else None
        invoke = self.client.async_client.invoke
        try:
            invoke(proxy, "InitializeConnection", self._request, self._on_initialized, fd=fd)
            invoke(proxy, "GetAsyncCommand", pb.GetAsyncCommandRequest(), self._on_command)
        except Exception:
            _log.exception("cannot send InitializeConnection")
            self.client.async_client.close()
            self._lose()

    def _on_initialized(self, reply: Reply) -> None:
        if not reply.success or reply.message is None:
            _log.warning("the tracing service refused producer %r", self.name)
            self.client.async_client.close()
            self._lose()
            return
        response = reply.unwrap(pb.InitializeConnectionResponse)
        self._emulation = response.use_shmem_emulation
        provided = self._producer_shm
        if provided is not None and response.using_shmem_provided_by_producer:
            page_size = self._request.shared_memory_page_size_hint_bytes or (
                _DEFAULT_PAGE_SIZE_KB * 1024
            )
            self._adopt_smb(provided, page_size)
        self._set_ready()

    def _on_ready(self) -> None:
        self.producer.on_connect()

    def _on_lost(self) -> None:
        self._report_disconnect()

    def _report_disconnect(self) -> None:
        if self._disconnect_reported:
            return
        self._disconnect_reported = True
        self.producer.on_disconnect()

    def _adopt_smb(self, shm: SharedMemory | None, page_size: int) -> None:
        buffer = shm.buffer if shm is not None else bytearray(SHMEM_EMULATION_SIZE)
        self._arbiter = SharedMemoryArbiter(
            buffer,
            page_size,
            self._commit_from_arbiter,
            post_task=self._post_for_arbiter,
            emulation=shm is None,
            register_writer=self.register_trace_writer,
            unregister_writer=self.unregister_trace_writer,
        )
        self._shm = shm
        self._page_size_kb = page_size // 1024

    def _post_for_arbiter(self, task: Callable[[], None]) -> None:
        self.post(task)

    def _commit_from_arbiter(
        self, request: CommitDataRequest, callback: Callable[[], None] | None
    ) -> None:
        self.commit_data(request, callback)

    def _on_command(self, reply: Reply) -> None:
        if reply.message is None:
            if reply.fd is not None:
                os.close(reply.fd)
            if not reply.has_more:
                _log.debug("the GetAsyncCommand stream ended")
            return
        command = reply.unwrap(pb.GetAsyncCommandResponse)
        kind = command.WhichOneof("cmd")
        producer = self.producer
        if kind == "setup_tracing":
            self._setup_tracing(command.setup_tracing, reply.fd)
        elif reply.fd is not None:
            _log.debug("ignoring an fd sent with %s", kind)
            os.close(reply.fd)
        if kind == "setup_data_source":
            setup = command.setup_data_source
            self._setup_ids.add(setup.new_instance_id)
            producer.setup_data_source(setup.new_instance_id, setup.config)
        elif kind == "start_data_source":
            start = command.start_data_source
            if start.new_instance_id not in self._setup_ids:
                producer.setup_data_source(start.new_instance_id, start.config)
            producer.start_data_source(start.new_instance_id, start.config)
        elif kind == "stop_data_source":
            instance_id = command.stop_data_source.instance_id
            producer.stop_data_source(instance_id)
            self._setup_ids.discard(instance_id)
        elif kind == "flush":
            flush = command.flush
            producer.flush(flush.request_id, list(flush.data_source_ids), flush.flags)
            if not acks_flush_itself(producer):
                self.notify_flush_complete(flush.request_id)
        elif kind == "clear_incremental_state":
            producer.clear_incremental_state(list(command.clear_incremental_state.data_source_ids))
        elif kind != "setup_tracing":
            _log.debug("ignoring an unknown async command")

    def _setup_tracing(
        self, setup: pb.GetAsyncCommandResponse.SetupTracing, fd: int | None
    ) -> None:
        if self._arbiter is not None:
            if fd is not None:
                os.close(fd)
        else:
            page_size = setup.shared_buffer_page_size_kb * 1024
            if self._emulation:
                if fd is not None:
                    os.close(fd)
                self._adopt_smb(None, page_size)
            elif fd is None:
                _log.warning("SetupTracing came without a shared memory buffer")
                return
            else:
                try:
                    self._adopt_smb(SharedMemory.attach(fd), page_size)
                except SmbError as exc:
                    _log.warning("cannot map the shared memory buffer: %s", exc)
                    return
        self.producer.on_tracing_setup()


def _log_refusal(name: str) -> Callable[[Reply], None]:
    def on_reply(reply: Reply) -> None:
        if not reply.success:
            _log.warning("the tracing service refused data source %r", name)

    return on_reply
