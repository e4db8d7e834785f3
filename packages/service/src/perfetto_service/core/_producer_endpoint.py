"""The service's side of one connected producer: its SMB, writers and command queue."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from perfetto_protos.common.commit_data_request_pb2 import CommitDataRequest
from perfetto_protos.common.data_source_descriptor_pb2 import DataSourceDescriptor
from perfetto_protos.config.data_source_config_pb2 import DataSourceConfig
from perfetto_smb import (
    MAX_WRITER_ID,
    CopiedChunk,
    SharedMemory,
    SharedMemoryABI,
    SharedMemoryReader,
    SmbError,
)

from perfetto_service._interfaces import (
    ClientIdentity,
    Producer,
    TaskRunner,
    acks_flush_itself,
)
from perfetto_service.core._chunk_mover import Buffer
from perfetto_service.core._trace_buffer import PacketSequenceProperties

if TYPE_CHECKING:
    from perfetto_service.core._tracing_service import TracingService

_log = logging.getLogger("perfetto_service")


class ProducerEndpointImpl:
    """What one producer calls on the service (a `ProducerEndpoint`), and its state there.

    Commands for the producer (setup, start, stop, flush, ...) are posted on the task runner
    in the order the service issues them; none is delivered after `disconnect()`.
    """

    def __init__(
        self,
        service: TracingService,
        producer_id: int,
        identity: ClientIdentity,
        producer: Producer,
        *,
        name: str,
        task_runner: TaskRunner,
        in_process: bool,
        smb_scraping_enabled: bool,
        shm_size_hint_bytes: int,
        shm_page_size_hint_bytes: int,
        sdk_version: str,
    ) -> None:
        self._service = service
        self.id = producer_id
        self.identity = identity
        self.producer = producer
        self.name = name
        self.sdk_version = sdk_version
        self.in_process = in_process
        self.smb_scraping_enabled = smb_scraping_enabled
        self.shm_size_hint_bytes = shm_size_hint_bytes
        self.shm_page_size_hint_bytes = shm_page_size_hint_bytes
        self._task_runner = task_runner
        self.connected = True
        self.allowed_target_buffers: set[int] = set()
        self.writers: dict[int, int] = {}
        """Registered trace writers: writer id -> target buffer."""
        self.writers_refused = 0
        """RegisterTraceWriter calls refused for a writer id out of range."""
        self._shm: SharedMemory | None = None
        self._abi: SharedMemoryABI | None = None
        self._reader: SharedMemoryReader | None = None
        self._page_size_kb = 0
        self._provided_by_producer = False
        self._sequences: dict[int, PacketSequenceProperties] = {}

    # Service side ------------------------------------------------------------------------

    @property
    def uid(self) -> int:
        """The producer's trusted uid."""
        return self.identity.uid

    def sequence(self, writer_id: int) -> PacketSequenceProperties:
        """The trusted sequence properties of one of this producer's writers."""
        props = self._sequences.get(writer_id)
        if props is None:
            identity = self.identity
            props = self._sequences[writer_id] = PacketSequenceProperties(
                self.id,
                identity.uid,
                identity.pid if identity.pid >= 0 else None,
                writer_id,
                identity.machine_id,
            )
        return props

    def setup_shared_memory(
        self, shm: SharedMemory, page_size: int, *, provided_by_producer: bool
    ) -> None:
        """Adopts the producer's SMB and tells the producer tracing is set up."""
        self._shm = shm
        self._abi = SharedMemoryABI(shm.buffer, page_size)
        self._reader = SharedMemoryReader(self._abi)
        self._page_size_kb = page_size // 1024
        self._provided_by_producer = provided_by_producer
        self._post(self.producer.on_tracing_setup)

    def is_shmem_provided_by_producer(self) -> bool:
        """Whether the SMB in use came from the producer (InitializeConnectionResponse f1)."""
        return self._provided_by_producer

    def scrape(self) -> list[CopiedChunk]:
        """Copies the chunks of registered writers still in the SMB (see SMB scraping)."""
        if self._reader is None or not self.writers:
            return []
        return self._reader.scrape(self.writers)

    def release(self) -> None:
        """Forgets the SMB (the producer left); the mapping goes once nobody else uses it.

        Says how many RegisterTraceWriter calls were refused, if any were.
        """
        self.connected = False
        if self.writers_refused:
            _log.warning(
                'producer %d "%s" left; %d RegisterTraceWriter calls were refused (writer id '
                "out of range)",
                self.id,
                self.name,
                self.writers_refused,
            )
        if self._abi is not None:
            self._abi.close()
            self._abi = None
            self._reader = None
        if self._shm is not None:
            # An in-process producer may still map it; the region then goes with its last user.
            with contextlib.suppress(SmbError):
                self._shm.close()

    def _post(self, task: Callable[[], None]) -> None:
        def run() -> None:
            if self.connected:
                task()

        self._task_runner.post_task(run)

    def send_setup_data_source(self, instance_id: int, config: DataSourceConfig) -> None:
        """Queues SetupDataSource (the buffer becomes one this producer may write into)."""
        self.allowed_target_buffers.add(config.target_buffer)
        self._post(lambda: self.producer.setup_data_source(instance_id, config))

    def send_start_data_source(self, instance_id: int, config: DataSourceConfig) -> None:
        """Queues StartDataSource."""
        self._post(lambda: self.producer.start_data_source(instance_id, config))

    def send_stop_data_source(self, instance_id: int) -> None:
        """Queues StopDataSource."""
        self._post(lambda: self.producer.stop_data_source(instance_id))

    def send_flush(self, request_id: int, instance_ids: Sequence[int], flags: int) -> None:
        """Queues a Flush."""
        ids = list(instance_ids)
        producer = self.producer

        def deliver() -> None:
            producer.flush(request_id, ids, flags)
            if not acks_flush_itself(producer):
                self.notify_flush_complete(request_id)

        self._post(deliver)

    def send_clear_incremental_state(self, instance_ids: Sequence[int]) -> None:
        """Queues ClearIncrementalState."""
        ids = list(instance_ids)
        self._post(lambda: self.producer.clear_incremental_state(ids))

    def on_free_buffers(self, buffer_ids: Sequence[int]) -> None:
        """The session owning `buffer_ids` ended: stop accepting chunks for them."""
        self.allowed_target_buffers.difference_update(buffer_ids)

    # ProducerEndpoint ---------------------------------------------------------------------

    def disconnect(self) -> None:
        """Leaves the service; what was committed stays in the trace."""
        if self.connected:
            self._service.disconnect_producer(self)
            self.producer.on_disconnect()

    def register_data_source(self, descriptor: DataSourceDescriptor) -> None:
        """Advertises a data source that sessions can enable by name."""
        if self.connected:
            self._service.register_data_source(self, descriptor)

    def update_data_source(self, descriptor: DataSourceDescriptor) -> None:
        """Replaces the descriptor of a data source registered earlier (same id and name)."""
        if self.connected:
            self._service.update_data_source(self, descriptor)

    def unregister_data_source(self, name: str) -> None:
        """Withdraws a data source; its running instances are stopped."""
        if self.connected:
            self._service.unregister_data_source(self, name)

    def register_trace_writer(self, writer_id: int, target_buffer: int) -> None:
        """Tells the service which buffer a writer commits to (needed for SMB scraping).

        Writer ids are upstream's, 1 to `MAX_WRITER_ID`, so a producer holds at most that many
        entries; any other id is refused, counted in `writers_refused`, logged once and
        counted again when the producer leaves.
        """
        if not 1 <= writer_id <= MAX_WRITER_ID:
            if not self.writers_refused:
                _log.warning(
                    'producer %d "%s": RegisterTraceWriter with writer id %d refused (valid: '
                    "1-%d); further ones are counted, not logged",
                    self.id,
                    self.name,
                    writer_id,
                    MAX_WRITER_ID,
                )
            self.writers_refused += 1
            return
        self.writers[writer_id] = target_buffer

    def unregister_trace_writer(self, writer_id: int) -> None:
        """Forgets a writer registered with `register_trace_writer`."""
        self.writers.pop(writer_id, None)

    def commit_data(
        self, request: CommitDataRequest, callback: Callable[[], None] | None = None
    ) -> None:
        """Moves completed chunks out of shared memory, applies patches, acks a flush.

        Everything in `request` is untrusted: bad entries are skipped and counted in the
        service's stats. `callback` runs last, before this returns.
        """
        self.commit_data_bytes(request.SerializeToString(), callback)

    def commit_data_bytes(
        self, request: Buffer, callback: Callable[[], None] | None = None
    ) -> None:
        """`commit_data` for a serialized request as `commit_data_request` returns it (how
        the producer port hands CommitData over: its chunks are moved with no message object).
        """
        reader = self._reader
        if self.connected and reader is not None:
            service = self._service
            patches, flush_request_id = service.move_chunks(self, reader, request)
            if patches:
                service.apply_chunk_patches(self, patches)
            if flush_request_id:
                service.notify_flush_done_for_producer(self.id, flush_request_id)
        if callback is not None:
            callback()

    def shared_memory(self) -> SharedMemory | None:
        """The producer's shared memory buffer, once tracing was set up."""
        return self._shm

    def shared_buffer_page_size_kb(self) -> int:
        """The page size of the shared memory buffer, in KiB."""
        return self._page_size_kb

    def notify_flush_complete(self, request_id: int) -> None:
        """Acks a flush request (the same as CommitData with flush_request_id)."""
        if self.connected and request_id:
            self._service.notify_flush_done_for_producer(self.id, request_id)

    def notify_data_source_started(self, instance_id: int) -> None:
        """Acks `start_data_source` for a data source with will_notify_on_start."""
        if self.connected:
            self._service.notify_data_source_started(self.id, instance_id)

    def notify_data_source_stopped(self, instance_id: int) -> None:
        """Acks `stop_data_source` for a data source with will_notify_on_stop."""
        if self.connected:
            self._service.notify_data_source_stopped(self.id, instance_id)

    def activate_triggers(self, names: Sequence[str]) -> None:
        """Fires triggers that sessions may be waiting for."""
        if self.connected:
            self._service.activate_triggers(self, names)

    def sync(self, callback: Callable[[], None]) -> None:
        """Calls `callback` once every call made before it was processed."""
        self._task_runner.post_task(callback)
