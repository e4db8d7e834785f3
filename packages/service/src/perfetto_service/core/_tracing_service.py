"""The tracing service core: producers, consumers, sessions, buffers, flushes and triggers.

Upstream's TracingServiceImpl, restated. All of it runs on the one task runner that owns the
service's state; everything a producer sends is untrusted and checked here or below.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import random
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from perfetto_protos.common.data_source_descriptor_pb2 import DataSourceDescriptor
from perfetto_protos.common.observable_events_pb2 import ObservableEvents
from perfetto_protos.common.trace_stats_pb2 import TraceStats
from perfetto_protos.common.tracing_service_capabilities_pb2 import TracingServiceCapabilities
from perfetto_protos.common.tracing_service_state_pb2 import TracingServiceState
from perfetto_protos.config.data_source_config_pb2 import DataSourceConfig
from perfetto_protos.config.trace_config_pb2 import TraceConfig
from perfetto_protos.tags.fields import (
    TracingServiceEvent_all_data_sources_flushed_ID,
    TracingServiceEvent_all_data_sources_started_ID,
    TracingServiceEvent_flush_started_ID,
    TracingServiceEvent_last_flush_slow_data_sources_ID,
    TracingServiceEvent_slow_starting_data_sources_ID,
    TracingServiceEvent_tracing_disabled_ID,
    TracingServiceEvent_tracing_started_ID,
)
from perfetto_smb import (
    MAX_WRITER_ID,
    CopiedChunk,
    SharedMemory,
    SharedMemoryReader,
    SmbError,
    ensure_valid_shm_sizes,
)

from perfetto_service._errors import ServiceError
from perfetto_service._interfaces import ClientIdentity, Consumer, Producer, TaskRunner
from perfetto_service._version import service_version
from perfetto_service.core._chunk_mover import (
    Buffer,
    ChunkPatches,
    move_chunks,
    target_buffer,
)
from perfetto_service.core._config_checks import check_trace_config, invalid_utf8_field
from perfetto_service.core._consumer_endpoint import ConsumerEndpointImpl
from perfetto_service.core._name_filter import name_matches
from perfetto_service.core._producer_endpoint import ProducerEndpointImpl
from perfetto_service.core._relay_clients import RelayClients, RelayEndpoint
from perfetto_service.core._service_packets import (
    ServicePacketWriter,
    SystemInfo,
    boot_time_ns,
    capture_clock_snapshot,
    collect_system_info,
    machine_name,
)
from perfetto_service.core._session import (
    ClockSnapshot,
    DataSourceInstance,
    FlushStrategy,
    InstanceState,
    PendingFlush,
    SessionState,
    TracingSession,
    TriggerInfo,
)
from perfetto_service.core._session_packets import data_sources_event_packet
from perfetto_service.core._session_reader import SessionReader
from perfetto_service.core._trace_buffer import (
    CHUNK_PAYLOAD_HISTOGRAM_THRESHOLDS,
    OverwritePolicy,
    Patch,
    TraceBuffer,
)
from perfetto_service.core._write_into_file import (
    DEFAULT_WRITE_PERIOD_MS,
    TRACE_FILE_WRITE_FAILED,
    WRITE_RETRY_MS,
    TraceFileWriter,
    create_trace_file,
    write_period_ms,
)

_log = logging.getLogger("perfetto_service")


def _tracing_service_version() -> str:
    """What the service reports as its version (SystemInfo, QueryServiceState)."""
    return f"Perfetto-py v{service_version()}"


DEFAULT_SNAPSHOT_INTERVAL_MS = 10_000
"""Period of the sync marker / trace stats / clock drift tick (snapshot_interval_ms)."""
ALL_DATA_SOURCES_STARTED_TIMEOUT_MS = 20_000
"""After this long, data sources that did not start are listed in the trace."""
READ_BUFFERS_BYTES_PER_TASK = 32 * 1024
"""Roughly how much one ReadBuffers task reads before yielding (kApproxBytesPerTask)."""
WRITE_INTO_FILE_BYTES_PER_READ = 1024 * 1024
"""How much each read of a write_into_file drain takes (kWriteIntoFileChunkSize)."""

DEFAULT_FILE_WRITE_TIMEOUT_S = 10.0
"""How long the reader of a write_into_file pipe may take nothing before the session fails."""

MAX_PENDING_FLUSHES = 1000
MAX_PATCHES_PER_CHUNK = 1024
MAX_LISTED_DATA_SOURCES = 32

_MAX_PRODUCER_ID = 0xFFFF
_MAX_BUFFER_ID = 0xFFFF
_SIGNIFICANT_DRIFT_NS = 10_000_000
_TRIGGER_WINDOW_NS = 24 * 3600 * 1_000_000_000

_TRIGGER_START = TraceConfig.TriggerConfig.START_TRACING
_TRIGGER_STOP = TraceConfig.TriggerConfig.STOP_TRACING
_TRIGGER_CLONE = TraceConfig.TriggerConfig.CLONE_SNAPSHOT

# FlushFlags: reason in bits 0-3, initiator in bits 4-7.
FLUSH_REASON_PERIODIC = 1
FLUSH_REASON_TRACE_STOP = 2
FLUSH_REASON_TRACE_CLONE = 3
FLUSH_INITIATOR_TRACED = 1


def flush_flags(initiator: int, reason: int) -> int:
    """The FlushFlags word for an initiator and a reason."""
    return (initiator << 4) | reason


@dataclass(eq=False)
class RegisteredDataSource:
    """A data source a producer registered (equal only to itself)."""

    producer_id: int
    descriptor: DataSourceDescriptor


def _new_trace_uuid(config: TraceConfig) -> tuple[int, int]:
    msb, lsb = config.trace_uuid_msb, config.trace_uuid_lsb
    if msb or lsb:
        return msb, lsb
    raw = uuid.uuid4().bytes
    return (
        int.from_bytes(raw[8:], "little", signed=True),
        int.from_bytes(raw[:8], "little", signed=True),
    )


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


def physical_memory_bytes() -> int:
    """The machine's memory: the default cap on buffer sizes, as they could never all fill."""
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


class TracingService:
    """The tracing service: producers contribute data, consumers control sessions and read.

    `uid` is the uid the service runs as (trusted_uid of its own packets; lockdown mode only
    admits producers of this uid). `smb_scraping_enabled` is the default for producers that
    do not say (InitializeConnectionRequest.smb_scraping_mode UNSPECIFIED).
    `max_buffer_bytes` caps the sizes of all buffers together: EnableTracing past it fails.
    It defaults to the machine's memory (buffers commit memory only as data is written).
    """

    def __init__(
        self,
        task_runner: TaskRunner,
        *,
        uid: int | None = None,
        smb_scraping_enabled: bool = False,
        system_info: SystemInfo | None = None,
        max_buffer_bytes: int | None = None,
        file_write_timeout_s: float = DEFAULT_FILE_WRITE_TIMEOUT_S,
    ) -> None:
        self._task_runner = task_runner
        self.max_buffer_bytes = (
            physical_memory_bytes() if max_buffer_bytes is None else max_buffer_bytes
        )
        self._file_write_timeout_s = file_write_timeout_s
        self.uid = os.getuid() if uid is None else uid
        self.smb_scraping_enabled = smb_scraping_enabled
        self._packet_writer = ServicePacketWriter(self.uid)
        self._system_info = system_info
        self._producers: dict[int, ProducerEndpointImpl] = {}
        self._last_producer_id = 0
        self._data_sources: dict[RegisteredDataSource, None] = {}
        """The registered data sources in registration order (keys: removed in O(1))."""
        self._data_source_index: dict[tuple[int, str], list[RegisteredDataSource]] = {}
        """(producer id, name) -> that producer's data sources of that name, in order."""
        self._data_source_ids: set[tuple[int, int]] = set()
        """(producer id, descriptor id) of the registered data sources with a non-zero id."""
        self._sessions: dict[int, TracingSession] = {}
        self._last_session_id = 0
        self._buffers: dict[int, TraceBuffer] = {}
        self._last_buffer_id = 0
        self._last_instance_id = 0
        self._last_flush_request_id = 0
        self._lockdown_mode = False
        self._trigger_history: list[tuple[int, bytes]] = []
        self.chunks_discarded = 0
        self.patches_discarded = 0
        self.relay_clients = RelayClients(self.uid)
        self._reader = SessionReader(
            self._packet_writer,
            self._buffers,
            machine_of=self._machine_of,
            trace_stats=self.trace_stats,
            system_info=self._get_system_info,
            relay_clients=self.relay_clients,
        )

    def _machine_of(self, producer_id: int) -> int:
        endpoint = self._producers.get(producer_id)
        return endpoint.identity.machine_id if endpoint is not None else 0

    def _get_system_info(self) -> SystemInfo:
        if self._system_info is None:
            self._system_info = collect_system_info(_tracing_service_version())
        return self._system_info

    # Lookups -------------------------------------------------------------------------------

    def session(self, session_id: int) -> TracingSession | None:
        """The session with this id, if it exists."""
        return self._sessions.get(session_id) if session_id else None

    def producer(self, producer_id: int) -> ProducerEndpointImpl | None:
        """The connected producer with this id, if any."""
        return self._producers.get(producer_id)

    def buffer(self, buffer_id: int) -> TraceBuffer | None:
        """The central buffer with this global id, if any."""
        return self._buffers.get(buffer_id)

    @property
    def lockdown_mode(self) -> bool:
        """Whether only producers of the service's own uid may connect and trace."""
        return self._lockdown_mode

    # Producers -----------------------------------------------------------------------------

    def connect_producer(  # noqa: PLR0917 - upstream's ConnectProducer arguments, in order
        self,
        producer: Producer,
        identity: ClientIdentity,
        name: str,
        shm_size_hint_bytes: int = 0,
        in_process: bool = False,
        smb_scraping_mode: int = 0,
        shm_page_size_hint_bytes: int = 0,
        shm: SharedMemory | None = None,
        sdk_version: str = "",
    ) -> ProducerEndpointImpl:
        """Admits a producer; raises ServiceError in lockdown mode or with too many producers.

        `smb_scraping_mode` is InitializeConnectionRequest's (0 default, 1 on, 2 off). `shm`
        is a producer-provided SMB: adopted if its size and `shm_page_size_hint_bytes` are
        valid and it is sealed, otherwise closed (the service then creates one).
        `Producer.on_connect` is posted first, then `on_tracing_setup` once an SMB exists.
        """
        if self._lockdown_mode and identity.uid != self.uid:
            if shm is not None:
                shm.close()
            raise ServiceError(f"lockdown mode: producers of uid {identity.uid} are refused")
        if len(self._producers) >= _MAX_PRODUCER_ID:
            if shm is not None:
                shm.close()
            raise ServiceError("too many producers")
        producer_id = self._next_producer_id()
        scraping = {1: True, 2: False}.get(smb_scraping_mode, self.smb_scraping_enabled)
        endpoint = ProducerEndpointImpl(
            self,
            producer_id,
            identity,
            producer,
            name=name,
            task_runner=self._task_runner,
            in_process=in_process,
            smb_scraping_enabled=scraping,
            shm_size_hint_bytes=shm_size_hint_bytes,
            shm_page_size_hint_bytes=shm_page_size_hint_bytes,
            sdk_version=sdk_version,
        )
        self._producers[producer_id] = endpoint
        _log.info(
            'Producer %d "%s" connected, uid=%d pid=%d sdk="%s"',
            producer_id,
            name,
            identity.uid,
            identity.pid,
            sdk_version,
        )

        def on_connect() -> None:
            if endpoint.connected:
                producer.on_connect()

        self._task_runner.post_task(on_connect)
        if shm is not None:
            size, page_size = ensure_valid_shm_sizes(shm.size, shm_page_size_hint_bytes)
            sealed_ok = shm.sealed or not hasattr(os, "memfd_create")
            if size == shm.size and page_size == shm_page_size_hint_bytes and sealed_ok:
                endpoint.setup_shared_memory(shm, page_size, provided_by_producer=True)
            else:
                shm.close()
        return endpoint

    def _next_producer_id(self) -> int:
        while True:
            self._last_producer_id = self._last_producer_id % _MAX_PRODUCER_ID + 1
            if self._last_producer_id not in self._producers:
                return self._last_producer_id

    def disconnect_producer(self, endpoint: ProducerEndpointImpl) -> None:
        """Forgets a producer: its committed data stays, its data sources go."""
        if self._producers.get(endpoint.id) is not endpoint:
            return
        for session in list(self._sessions.values()):
            self._scrape(session, endpoint)
        self._remove_instances(endpoint, None)
        for key in [key for key in self._data_source_index if key[0] == endpoint.id]:
            for registered in self._data_source_index.pop(key):
                self._forget(registered)
        del self._producers[endpoint.id]
        endpoint.release()
        _log.info('Producer %d "%s" disconnected', endpoint.id, endpoint.name)

    def register_data_source(
        self, endpoint: ProducerEndpointImpl, descriptor: DataSourceDescriptor
    ) -> None:
        """Adds a data source and sets it up in every session that wants it."""
        if not descriptor.name:
            return
        if descriptor.id:
            if (endpoint.id, descriptor.id) in self._data_source_ids:
                return
            self._data_source_ids.add((endpoint.id, descriptor.id))
        registered = RegisteredDataSource(endpoint.id, DataSourceDescriptor())
        registered.descriptor.CopyFrom(descriptor)
        self._data_sources[registered] = None
        self._data_source_index.setdefault((endpoint.id, descriptor.name), []).append(registered)
        for session in list(self._sessions.values()):
            if session.state not in (SessionState.STARTED, SessionState.CONFIGURED):
                continue
            producer_config = self._producer_config(session, endpoint.name)
            for cfg_data_source in session.config.data_sources:
                if cfg_data_source.config.name != descriptor.name:
                    continue
                instance = self._setup_data_source(
                    cfg_data_source, producer_config, registered, session
                )
                if instance is not None and session.state is SessionState.STARTED:
                    self._start_data_source_instance(endpoint, session, instance)

    def update_data_source(
        self, endpoint: ProducerEndpointImpl, descriptor: DataSourceDescriptor
    ) -> None:
        """Replaces the descriptor registered with the same (name, non-zero id)."""
        if not descriptor.id:
            return
        for registered in self._data_source_index.get((endpoint.id, descriptor.name), ()):
            if registered.descriptor.id == descriptor.id:
                registered.descriptor.CopyFrom(descriptor)
                return

    def unregister_data_source(self, endpoint: ProducerEndpointImpl, name: str) -> None:
        """Removes a data source, stopping its instances in every session."""
        self._remove_instances(endpoint, name)
        key = (endpoint.id, name)
        registered = self._data_source_index.get(key)
        if registered:
            self._forget(registered.pop(0))
            if not registered:
                del self._data_source_index[key]

    def _forget(self, registered: RegisteredDataSource) -> None:
        del self._data_sources[registered]
        self._data_source_ids.discard((registered.producer_id, registered.descriptor.id))

    def _remove_instances(self, endpoint: ProducerEndpointImpl, name: str | None) -> None:
        """Stops and removes `endpoint`'s instances of data source `name` (None: all)."""
        for session in list(self._sessions.values()):
            removed = [
                instance
                for instance in session.data_source_instances
                if instance.producer_id == endpoint.id
                and (name is None or instance.data_source_name == name)
            ]
            if not removed:
                continue
            for instance in removed:
                if instance.state is not InstanceState.STOPPED:
                    if instance.state is not InstanceState.STOPPING:
                        self._stop_data_source_instance(
                            endpoint, session, instance, disable_immediately=False
                        )
                    if instance.state is InstanceState.STOPPING:
                        self.notify_data_source_stopped(endpoint.id, instance.instance_id)
            gone = {id(instance) for instance in removed}
            session.data_source_instances[:] = [
                i for i in session.data_source_instances if id(i) not in gone
            ]
            self.maybe_notify_all_data_sources_started(session)

    # Commits -------------------------------------------------------------------------------

    def move_chunks(
        self, endpoint: ProducerEndpointImpl, reader: SharedMemoryReader, request: Buffer
    ) -> tuple[list[ChunkPatches], int]:
        """Copies the chunks a producer's CommitData moves into their buffers, if it may.

        `request` is the serialized CommitDataRequest (see `commit_data_request`); returns its
        chunks_to_patch and flush_request_id.
        """
        discarded, patches, flush_request_id = move_chunks(self._buffers, endpoint, reader, request)
        self.chunks_discarded += discarded
        return patches, flush_request_id

    def copy_chunk_into_buffer(
        self, endpoint: ProducerEndpointImpl, buffer_id: int, chunk: CopiedChunk
    ) -> None:
        """Copies a chunk read from a producer into `buffer_id`, if the producer may write there."""
        buffer = target_buffer(self._buffers, endpoint, buffer_id, chunk.writer_id)
        if buffer is None:
            self.chunks_discarded += 1
            return
        buffer.copy_chunk_untrusted(
            endpoint.sequence(chunk.writer_id),
            chunk.chunk_id,
            chunk.packet_count,
            chunk.flags,
            chunk.payload,
            chunk_complete=chunk.complete,
        )

    def apply_chunk_patches(
        self, endpoint: ProducerEndpointImpl, chunks_to_patch: Sequence[ChunkPatches]
    ) -> None:
        """Applies patches to chunks of `endpoint` (only its own: the producer id is trusted)."""
        for buffer_id, writer_id, chunk_id, entry_patches, has_more_patches in chunks_to_patch:
            buffer = self._buffers.get(buffer_id)
            num_patches = len(entry_patches)
            if not 0 < writer_id <= MAX_WRITER_ID or buffer is None:
                self.patches_discarded += num_patches
                continue
            if num_patches > MAX_PATCHES_PER_CHUNK:
                self.patches_discarded += num_patches
                continue
            patches: list[Patch] = []
            for patch in entry_patches:
                if len(patch.data) != 4:
                    self.patches_discarded += 1
                    continue
                patches.append(patch)
            buffer.try_patch_chunk_contents(
                endpoint.id, writer_id, chunk_id, patches, has_more_patches
            )

    def _scrape(self, session: TracingSession, endpoint: ProducerEndpointImpl) -> None:
        if not endpoint.smb_scraping_enabled or not endpoint.writers:
            return
        session_buffers = set(session.buffers_index)
        if not session_buffers & endpoint.allowed_target_buffers:
            return
        for chunk in endpoint.scrape():
            buffer_id = endpoint.writers.get(chunk.writer_id)
            if buffer_id is not None and buffer_id in session_buffers:
                self.copy_chunk_into_buffer(endpoint, buffer_id, chunk)

    def _scrape_all(self, session: TracingSession) -> None:
        for endpoint in list(self._producers.values()):
            self._scrape(session, endpoint)

    # Relays --------------------------------------------------------------------------------

    def connect_relay_client(self, machine_id: int, client_id: int) -> RelayEndpoint:
        """Admits a relay (upstream's ConnectRelayClient): its machine's info and clocks."""
        return self.relay_clients.connect(machine_id, client_id)

    # Consumers -----------------------------------------------------------------------------

    def connect_consumer(self, consumer: Consumer, uid: int) -> ConsumerEndpointImpl:
        """Admits a consumer; `Consumer.on_connect` is posted."""
        endpoint = ConsumerEndpointImpl(self, consumer, uid, self._task_runner)
        _log.debug("Consumer connected, uid=%d", uid)

        def on_connect() -> None:
            if endpoint.connected:
                consumer.on_connect()

        self._task_runner.post_task(on_connect)
        return endpoint

    def disconnect_consumer(self, endpoint: ConsumerEndpointImpl) -> None:
        """Ends the consumer's attached session (detached ones keep running)."""
        _log.debug("Consumer disconnected, uid=%d", endpoint.uid)
        if endpoint.tracing_session_id:
            self.free_buffers(endpoint.tracing_session_id)
            endpoint.tracing_session_id = 0

    def detach_consumer(self, endpoint: ConsumerEndpointImpl, key: str) -> bool:
        """Leaves the consumer's session running under `key`."""
        session = self.session(endpoint.tracing_session_id)
        if session is None or self._detached_session(endpoint.uid, key) is not None:
            return False
        session.consumer = None
        session.detach_key = key
        endpoint.tracing_session_id = 0
        return True

    def attach_consumer(self, endpoint: ConsumerEndpointImpl, key: str) -> bool:
        """Gives the session detached under `key` (same uid) to the consumer."""
        if endpoint.tracing_session_id:
            return False
        session = self._detached_session(endpoint.uid, key)
        if session is None:
            return False
        endpoint.tracing_session_id = session.id
        session.consumer = endpoint
        session.detach_key = ""
        return True

    def _detached_session(self, uid: int, key: str) -> TracingSession | None:
        for session in self._sessions.values():
            if session.consumer_uid == uid and session.detach_key == key and session.detach_key:
                return session
        return None

    # Enabling ------------------------------------------------------------------------------

    def enable_tracing(
        self, consumer: ConsumerEndpointImpl, config: TraceConfig, output_fd: int | None = None
    ) -> str:
        """Creates a session for `consumer`; returns an error message, or "" on success."""
        if self.session(consumer.tracing_session_id) is not None:
            error = (
                "A Consumer is trying to EnableTracing() but another tracing session is "
                "already active (forgot a call to FreeBuffers() ?)"
            )
        else:
            error = check_trace_config(
                config, sessions=list(self._sessions.values()), consumer_uid=consumer.uid
            )
        if not error and config.write_into_file and (output_fd is None) == (not config.output_path):
            error = (
                "When write_into_file==true either a FD needs to be passed or output_path "
                "must be populated (but not both)"
            )
        if error:
            if output_fd is not None:
                os.close(output_fd)
            return error
        if config.lockdown_mode == TraceConfig.LOCKDOWN_SET:
            self._lockdown_mode = True
        elif config.lockdown_mode == TraceConfig.LOCKDOWN_CLEAR:
            self._lockdown_mode = False

        file_writer: TraceFileWriter | None = None
        if config.write_into_file:
            if output_fd is None:
                try:
                    output_fd = create_trace_file(config.output_path)
                except ServiceError as e:
                    return str(e)
            file_writer = TraceFileWriter(output_fd, config.max_file_size_bytes, config.output_path)
        elif output_fd is not None:
            os.close(output_fd)

        buffers, error = self._allocate_buffers(config)
        if error:
            if file_writer is not None:
                file_writer.close()
            return error

        self._last_session_id += 1
        session_config = TraceConfig()
        session_config.CopyFrom(config)
        session = TracingSession(
            self._last_session_id, consumer, session_config, _new_trace_uuid(config)
        )
        session.buffers_index = buffers
        self._sessions[session.id] = session
        consumer.tracing_session_id = session.id

        if config.flush_period_ms > 0:
            session.flush_strategy = FlushStrategy.PERIODIC
            session.periodic_flush_ms = config.flush_period_ms
        if file_writer is not None:
            session.file_writer = file_writer
            session.write_period_ms = write_period_ms(config.file_write_period_ms)
            mode = config.write_flush_mode
            if mode in (TraceConfig.WRITE_FLUSH_AUTO, TraceConfig.WRITE_FLUSH_UNSPECIFIED):
                if session.write_period_ms <= DEFAULT_WRITE_PERIOD_MS:
                    session.flush_strategy = FlushStrategy.PERIODIC
                    session.periodic_flush_ms = DEFAULT_WRITE_PERIOD_MS
                else:
                    session.flush_strategy = FlushStrategy.ON_WRITE
            elif mode == TraceConfig.WRITE_FLUSH_ENABLED:
                session.flush_strategy = FlushStrategy.ON_WRITE

        for cfg_data_source in config.data_sources:
            for registered in list(self._data_sources):
                if registered.descriptor.name != cfg_data_source.config.name:
                    continue
                endpoint = self._producers[registered.producer_id]
                self._setup_data_source(
                    cfg_data_source,
                    self._producer_config(session, endpoint.name),
                    registered,
                    session,
                )

        trigger_mode = session.trigger_mode
        has_start_trigger = trigger_mode == _TRIGGER_START
        if has_start_trigger:
            session_id = session.id
            self._task_runner.post_delayed_task(
                lambda: self._on_start_triggers_timeout(session_id),
                config.trigger_config.trigger_timeout_ms,
            )
        elif trigger_mode in (_TRIGGER_STOP, _TRIGGER_CLONE):
            session.config.duration_ms = config.trigger_config.trigger_timeout_ms
        session.state = SessionState.CONFIGURED
        _log.info(
            "Configured tracing session %d, #sources:%d, duration:%d ms, #buffers:%d, "
            'total buffer size:%d KB, total sessions:%d, uid:%d session name: "%s"',
            session.id,
            len(config.data_sources),
            session.config.duration_ms,
            len(config.buffers),
            sum(buffer.size_kb for buffer in config.buffers),
            len(self._sessions),
            consumer.uid,
            config.unique_session_name,
        )
        if not config.deferred_start and not has_start_trigger:
            self.start_tracing(session.id)
        return ""

    def _allocate_buffers(self, config: TraceConfig) -> tuple[list[int], str]:
        """The global ids of new buffers for `config`; on failure none, and why."""
        buffers: list[int] = []
        error = ""
        sizes = [buffer_config.size_kb * 1024 for buffer_config in config.buffers]
        if any(size == 0 or size > 0xFFFFFFFF for size in sizes):
            return [], "Failed to allocate tracing buffers: Invalid buffer sizes"
        in_use = sum(buffer.size for buffer in self._buffers.values())
        if in_use + sum(sizes) > self.max_buffer_bytes:
            return [], (
                f"Failed to allocate tracing buffers: {sum(sizes) // 1024} KB requested, "
                f"{in_use // 1024} KB in use, traced's limit is {self.max_buffer_bytes // 1024} "
                "KB (traced --max-buffer-memory-mb)"
            )
        for buffer_config, size in zip(config.buffers, sizes, strict=True):
            if len(self._buffers) >= _MAX_BUFFER_ID:
                error = "Failed to allocate tracing buffers: OOM or too many buffers"
                break
            policy = (
                OverwritePolicy.DISCARD
                if buffer_config.fill_policy == TraceConfig.BufferConfig.DISCARD
                else OverwritePolicy.OVERWRITE
            )
            try:
                buffer = TraceBuffer(size, policy)
            except (MemoryError, OSError):
                error = "Failed to allocate tracing buffers: OOM or too many buffers"
                break
            buffer_id = self._next_buffer_id()
            self._buffers[buffer_id] = buffer
            buffers.append(buffer_id)
        if error:
            for buffer_id in buffers:
                del self._buffers[buffer_id]
            return [], error
        return buffers, ""

    def _next_buffer_id(self) -> int:
        while True:
            self._last_buffer_id = self._last_buffer_id % _MAX_BUFFER_ID + 1
            if self._last_buffer_id not in self._buffers:
                return self._last_buffer_id

    @staticmethod
    def _producer_config(session: TracingSession, producer_name: str) -> TraceConfig.ProducerConfig:
        for producer_config in session.config.producers:
            if producer_config.producer_name == producer_name:
                return producer_config
        return TraceConfig.ProducerConfig()

    def _setup_data_source(
        self,
        cfg_data_source: TraceConfig.DataSource,
        producer_config: TraceConfig.ProducerConfig,
        registered: RegisteredDataSource,
        session: TracingSession,
    ) -> DataSourceInstance | None:
        endpoint = self._producers[registered.producer_id]
        if self._lockdown_mode and endpoint.uid != self.uid:
            return None
        is_host = endpoint.identity.machine_id == 0
        if names := cfg_data_source.machine_name_filter:  # by name; "host" is always the host
            name = machine_name() if is_host else endpoint.identity.machine_name
            if name not in names and not (is_host and "host" in names):
                return None
        elif not session.config.trace_all_machines and not is_host:
            return None
        if (
            cfg_data_source.producer_name_filter or cfg_data_source.producer_name_regex_filter
        ) and not name_matches(
            endpoint.name,
            cfg_data_source.producer_name_filter,
            cfg_data_source.producer_name_regex_filter,
        ):
            return None
        ds_config = cfg_data_source.config
        relative_buffer = ds_config.target_buffer
        if ds_config.target_buffer_name:
            for index, buffer_config in enumerate(session.config.buffers):
                if buffer_config.name == ds_config.target_buffer_name:
                    relative_buffer = index
                    break
        if relative_buffer >= len(session.buffers_index):
            return None

        self._last_instance_id += 1
        config = DataSourceConfig()
        config.CopyFrom(ds_config)
        descriptor = registered.descriptor
        instance = DataSourceInstance(
            producer_id=endpoint.id,
            instance_id=self._last_instance_id,
            data_source_name=descriptor.name,
            config=config,
            will_notify_on_start=descriptor.will_notify_on_start,
            will_notify_on_stop=descriptor.will_notify_on_stop,
            handles_incremental_state_clear=descriptor.handles_incremental_state_clear,
            no_flush=descriptor.no_flush,
        )
        session.data_source_instances.append(instance)
        if session.consumer is not None:
            session.consumer.on_data_source_instance_state_change(endpoint.name, instance)

        config.trace_duration_ms = session.config.duration_ms
        if session.config.prefer_suspend_clock_for_duration:
            config.prefer_suspend_clock_for_duration = True
        config.stop_timeout_ms = session.data_source_stop_timeout_ms
        config.enable_extra_guardrails = session.config.enable_extra_guardrails
        config.session_initiator = DataSourceConfig.SESSION_INITIATOR_UNSPECIFIED
        config.tracing_session_id = session.id
        config.target_buffer = session.buffers_index[relative_buffer]

        if endpoint.shared_memory() is None:
            page_size = producer_config.page_size_kb * 1024 or endpoint.shm_page_size_hint_bytes
            shm_size = producer_config.shm_size_kb * 1024 or endpoint.shm_size_hint_bytes
            shm_size, page_size = ensure_valid_shm_sizes(shm_size, page_size)
            try:
                shm = SharedMemory.create(shm_size)
            except SmbError:
                session.data_source_instances.remove(instance)
                return None
            endpoint.setup_shared_memory(shm, page_size, provided_by_producer=False)
        endpoint.send_setup_data_source(instance.instance_id, config)
        return instance

    def change_trace_config(self, consumer: ConsumerEndpointImpl, config: TraceConfig) -> None:
        """Takes new producer name filters for the session's data sources (nothing else).

        A config with a string field that is not UTF-8 changes nothing (logged).
        """
        session = self.session(consumer.tracing_session_id)
        invalid = invalid_utf8_field(config)
        if invalid:
            _log.warning("ChangeTraceConfig ignored: TraceConfig.%s is not valid UTF-8", invalid)
            return
        if session is None or session.state not in (
            SessionState.STARTED,
            SessionState.CONFIGURED,
        ):
            return
        for cfg_data_source in session.config.data_sources:
            updated = next(
                (d for d in config.data_sources if d.config.name == cfg_data_source.config.name),
                None,
            )
            if updated is None:
                continue
            del cfg_data_source.producer_name_filter[:]
            cfg_data_source.producer_name_filter.extend(updated.producer_name_filter)
            del cfg_data_source.producer_name_regex_filter[:]
            cfg_data_source.producer_name_regex_filter.extend(updated.producer_name_regex_filter)
            set_up = {i.producer_id for i in session.data_source_instances}
            for registered in list(self._data_sources):
                if registered.descriptor.name != cfg_data_source.config.name:
                    continue
                endpoint = self._producers[registered.producer_id]
                if (
                    updated.producer_name_filter or updated.producer_name_regex_filter
                ) and not name_matches(
                    endpoint.name,
                    updated.producer_name_filter,
                    updated.producer_name_regex_filter,
                ):
                    continue
                if registered.producer_id in set_up:
                    continue
                instance = self._setup_data_source(
                    cfg_data_source,
                    self._producer_config(session, endpoint.name),
                    registered,
                    session,
                )
                if instance is not None and session.state is SessionState.STARTED:
                    self._start_data_source_instance(endpoint, session, instance)

    # Starting ------------------------------------------------------------------------------

    def start_tracing(self, session_id: int) -> None:
        """Starts a CONFIGURED session: its data sources, timers and snapshots."""
        session = self.session(session_id)
        if session is None or session.state is not SessionState.CONFIGURED:
            return
        session.state = SessionState.STARTED
        _log.info(
            "Started tracing session %d, #data source instances:%d",
            session_id,
            len(session.data_source_instances),
        )
        builtin = session.config.builtin_data_sources
        if not builtin.disable_clock_snapshotting:
            session.initial_clock_snapshot = capture_clock_snapshot()
        session.record_lifecycle_event(TracingServiceEvent_tracing_started_ID, boot_time_ns())

        generation = session.snapshot_generation
        interval = builtin.snapshot_interval_ms or DEFAULT_SNAPSHOT_INTERVAL_MS
        self._task_runner.post_task(
            lambda: self._periodic_snapshot_task(session_id, generation, interval)
        )
        if session.config.duration_ms > 0:
            self._task_runner.post_delayed_task(
                lambda: self._stop_on_duration_expiry(session_id), session.config.duration_ms
            )
        if session.file_writer is not None:
            flush_first = session.flush_strategy is FlushStrategy.ON_WRITE
            self._task_runner.post_delayed_task(
                functools.partial(self._read_into_file_task, session_id, flush_first),
                self._delay_to_next_period(session.write_period_ms),
            )
        if session.flush_strategy is FlushStrategy.PERIODIC:
            self._schedule_periodic_flush(session)
        if session.config.incremental_state_config.clear_period_ms:
            self._schedule_clear_incremental_state(session)
        for instance in list(session.data_source_instances):
            endpoint = self._producers.get(instance.producer_id)
            if endpoint is not None:
                self._start_data_source_instance(endpoint, session, instance)
        self.maybe_notify_all_data_sources_started(session)
        if session.consumer is not None:
            self._task_runner.post_delayed_task(
                lambda: self._on_all_data_sources_started_timeout(session_id),
                ALL_DATA_SOURCES_STARTED_TIMEOUT_MS,
            )

    @staticmethod
    def _delay_to_next_period(period_ms: int) -> int:
        return period_ms - _wall_ms() % period_ms

    def _start_data_source_instance(
        self,
        endpoint: ProducerEndpointImpl,
        session: TracingSession,
        instance: DataSourceInstance,
    ) -> None:
        instance.state = (
            InstanceState.STARTING if instance.will_notify_on_start else InstanceState.STARTED
        )
        if session.consumer is not None:
            session.consumer.on_data_source_instance_state_change(endpoint.name, instance)
        endpoint.send_start_data_source(instance.instance_id, instance.config)
        if instance.state is InstanceState.STARTED:
            self.maybe_notify_all_data_sources_started(session)

    def maybe_notify_all_data_sources_started(self, session: TracingSession) -> None:
        """Records and reports ALL_DATA_SOURCES_STARTED once every instance started."""
        if (
            session.consumer is None
            or session.did_notify_all_data_sources_started
            or not session.all_instances_started()
        ):
            return
        self._maybe_snapshot_clocks(session)
        session.record_lifecycle_event(
            TracingServiceEvent_all_data_sources_started_ID, boot_time_ns()
        )
        session.did_notify_all_data_sources_started = True
        session.consumer.on_all_data_sources_started()

    def _on_all_data_sources_started_timeout(self, session_id: int) -> None:
        session = self.session(session_id)
        if session is None or session.consumer is None:
            return
        if session.did_notify_all_data_sources_started:
            return
        slow: list[tuple[str, str]] = []
        for instance in session.data_source_instances:
            endpoint = self._producers.get(instance.producer_id)
            if instance.state is InstanceState.STARTED or endpoint is None:
                continue
            if len(slow) >= MAX_LISTED_DATA_SOURCES:
                break
            slow.append((endpoint.name, instance.data_source_name))
        timestamp = boot_time_ns()
        session.slow_start_event = (
            timestamp,
            data_sources_event_packet(
                self._packet_writer,
                timestamp,
                TracingServiceEvent_slow_starting_data_sources_ID,
                slow,
            ),
        )

    def notify_data_source_started(self, producer_id: int, instance_id: int) -> None:
        """A producer acked StartDataSource."""
        endpoint = self._producers.get(producer_id)
        for session in list(self._sessions.values()):
            instance = session.instance(producer_id, instance_id)
            if instance is None or session.state is not SessionState.STARTED:
                continue
            if instance.state is not InstanceState.STARTING:
                continue
            instance.state = InstanceState.STARTED
            if session.consumer is not None and endpoint is not None:
                session.consumer.on_data_source_instance_state_change(endpoint.name, instance)
            self.maybe_notify_all_data_sources_started(session)

    def _periodic_snapshot_task(self, session_id: int, generation: int, interval: int) -> None:
        session = self.session(session_id)
        if (
            session is None
            or session.state is not SessionState.STARTED
            or session.snapshot_generation != generation
        ):
            return
        session.should_emit_sync_marker = True
        session.should_emit_stats = True
        self._maybe_snapshot_clocks(session)
        self._task_runner.post_delayed_task(
            lambda: self._periodic_snapshot_task(session_id, generation, interval), interval
        )

    def _maybe_snapshot_clocks(self, session: TracingSession) -> None:
        if session.config.builtin_data_sources.disable_clock_snapshotting:
            return
        new = capture_clock_snapshot()
        ring = session.clock_snapshot_ring
        if ring and not _drifted(ring[-1], new):
            return
        ring.append(new)

    # Stopping ------------------------------------------------------------------------------

    def _stop_on_duration_expiry(self, session_id: int) -> None:
        session = self.session(session_id)
        if session is None:
            return
        if session.trigger_mode == _TRIGGER_STOP and session.received_triggers:
            return
        self.flush_and_disable_tracing(session_id)

    def disable_tracing(
        self, session_id: int, *, disable_immediately: bool = False, error: str = ""
    ) -> None:
        """Stops a session's data sources; the consumer hears once all acked or timed out."""
        session = self.session(session_id)
        if session is None or session.state in (
            SessionState.DISABLED,
            SessionState.CLONED_READ_ONLY,
        ):
            return
        if session.state is SessionState.DISABLING_WAITING_STOP_ACKS:
            if disable_immediately:
                self._disable_tracing_notify_consumer_and_flush_file(session, error)
            return
        if session.state is SessionState.CONFIGURED:
            disable_immediately = True
        for instance in list(session.data_source_instances):
            endpoint = self._producers.get(instance.producer_id)
            if endpoint is not None:
                self._stop_data_source_instance(
                    endpoint, session, instance, disable_immediately=disable_immediately
                )
        session.snapshot_generation += 1
        if session.all_instances_stopped():
            self._disable_tracing_notify_consumer_and_flush_file(session, error)
            return
        session.state = SessionState.DISABLING_WAITING_STOP_ACKS
        self._task_runner.post_delayed_task(
            lambda: self._on_disable_tracing_timeout(session_id),
            session.data_source_stop_timeout_ms,
        )

    def _stop_data_source_instance(
        self,
        endpoint: ProducerEndpointImpl,
        session: TracingSession,
        instance: DataSourceInstance,
        *,
        disable_immediately: bool,
    ) -> None:
        instance.state = (
            InstanceState.STOPPING
            if instance.will_notify_on_stop and not disable_immediately
            else InstanceState.STOPPED
        )
        if session.consumer is not None:
            session.consumer.on_data_source_instance_state_change(endpoint.name, instance)
        endpoint.send_stop_data_source(instance.instance_id)

    def notify_data_source_stopped(self, producer_id: int, instance_id: int) -> None:
        """A producer acked StopDataSource."""
        endpoint = self._producers.get(producer_id)
        for session in list(self._sessions.values()):
            instance = session.instance(producer_id, instance_id)
            if instance is None or instance.state is not InstanceState.STOPPING:
                continue
            instance.state = InstanceState.STOPPED
            if session.consumer is not None and endpoint is not None:
                session.consumer.on_data_source_instance_state_change(endpoint.name, instance)
            if (
                session.all_instances_stopped()
                and session.state is SessionState.DISABLING_WAITING_STOP_ACKS
            ):
                self._disable_tracing_notify_consumer_and_flush_file(session, "")

    def _on_disable_tracing_timeout(self, session_id: int) -> None:
        session = self.session(session_id)
        if session is not None and session.state is SessionState.DISABLING_WAITING_STOP_ACKS:
            self._disable_tracing_notify_consumer_and_flush_file(session, "")

    def _disable_tracing_notify_consumer_and_flush_file(
        self, session: TracingSession, error: str
    ) -> None:
        for instance in session.data_source_instances:
            if instance.state is InstanceState.STOPPED:
                continue
            instance.state = InstanceState.STOPPED
            endpoint = self._producers.get(instance.producer_id)
            if session.consumer is not None and endpoint is not None:
                session.consumer.on_data_source_instance_state_change(endpoint.name, instance)
        session.state = SessionState.DISABLED
        self._scrape_all(session)
        self._maybe_snapshot_clocks(session)
        session.record_lifecycle_event(TracingServiceEvent_tracing_disabled_ID, boot_time_ns())
        session.end_error = session.end_error or error
        if session.file_writer is not None:
            session.write_period_ms = 0
            session.should_emit_stats = True
            if not self.read_buffers_into_file(session.id, flush_first=False):
                self._finish_file(session)
            return  # `_finish_file` tells the consumer once the file is complete.
        if session.consumer is not None:
            session.consumer.notify_on_tracing_disabled(session.end_error)

    def _on_start_triggers_timeout(self, session_id: int) -> None:
        session = self.session(session_id)
        if session is not None and session.state is SessionState.CONFIGURED:
            self.disable_tracing(session_id)

    def free_buffers(self, session_id: int, error: str = "") -> None:
        """Ends a session for good: stops it, drops its buffers, closes its file."""
        session = self.session(session_id)
        if session is None:
            return
        self.disable_tracing(session_id, disable_immediately=True, error=error)
        stats = self.trace_stats(session)
        session.data_source_instances.clear()
        for endpoint in self._producers.values():
            endpoint.on_free_buffers(session.buffers_index)
        for buffer_id in session.buffers_index:
            self._buffers.pop(buffer_id, None)
        if session.file_writer is not None:
            session.file_writer.close()
            session.file_writer = None
        del self._sessions[session_id]
        _log.info(
            "Tracing session %d ended, total sessions:%d, %s",
            session_id,
            len(self._sessions),
            _stats_summary(stats),
        )
        # Flushes still waiting end as failed (upstream drops them, which fails the IPC call).
        for pending in session.pending_flushes.values():
            pending.callback(False)
        session.pending_flushes.clear()

    # Flushing ------------------------------------------------------------------------------

    def flush(
        self, session_id: int, timeout_ms: int, callback: Callable[[bool], None], flags: int = 0
    ) -> None:
        """Asks the session's data sources to commit; `callback(success)` at the end."""
        session = self.session(session_id)
        if session is None:
            callback(False)
            return
        session.record_lifecycle_event(TracingServiceEvent_flush_started_ID, boot_time_ns())
        by_producer: dict[int, list[int]] = {}
        for instance in session.data_source_instances:
            if not instance.no_flush:
                by_producer.setdefault(instance.producer_id, []).append(instance.instance_id)
        self._flush_data_source_instances(session, timeout_ms, by_producer, callback, flags)

    def _flush_data_source_instances(
        self,
        session: TracingSession,
        timeout_ms: int,
        by_producer: dict[int, list[int]],
        callback: Callable[[bool], None],
        flags: int,
    ) -> None:
        timeout_ms = timeout_ms or session.flush_timeout_ms
        if len(session.pending_flushes) > MAX_PENDING_FLUSHES:
            callback(False)
            return
        if session.state is not SessionState.STARTED:
            callback(False)
            return
        session.last_flush_events.clear()
        session.flushes_requested += 1
        self._last_flush_request_id += 1
        request_id = self._last_flush_request_id
        pending = session.pending_flushes[request_id] = PendingFlush(callback)
        for producer_id, instance_ids in by_producer.items():
            endpoint = self._producers.get(producer_id)
            if endpoint is None:
                continue
            endpoint.send_flush(request_id, instance_ids, flags)
            pending.producers.add(producer_id)
        if not by_producer:
            timeout_ms = 0
        session_id = session.id
        self._task_runner.post_delayed_task(
            lambda: self._on_flush_timeout(session_id, request_id, flags), timeout_ms
        )

    def notify_flush_done_for_producer(self, producer_id: int, request_id: int) -> None:
        """A producer acked every flush up to `request_id`."""
        for session in list(self._sessions.values()):
            for pending_id in [i for i in session.pending_flushes if i <= request_id]:
                pending = session.pending_flushes[pending_id]
                pending.producers.discard(producer_id)
                if pending.producers:
                    continue
                del session.pending_flushes[pending_id]
                session_id = session.id
                callback = pending.callback
                self._task_runner.post_task(
                    functools.partial(self._complete_flush, session_id, callback, success=True)
                )

    def _on_flush_timeout(self, session_id: int, request_id: int, flags: int) -> None:
        session = self.session(session_id)
        if session is None:
            return
        pending = session.pending_flushes.pop(request_id, None)
        if pending is None:
            return
        success = not pending.producers
        reason = flags & 0xF
        if not success and reason in (FLUSH_REASON_TRACE_STOP, FLUSH_REASON_TRACE_CLONE):
            slow: list[tuple[str, str]] = []
            for producer_id in pending.producers:
                endpoint = self._producers.get(producer_id)
                if endpoint is None:
                    continue
                slow.extend(
                    (endpoint.name, i.data_source_name)
                    for i in session.data_source_instances
                    if i.producer_id == producer_id
                )
            timestamp = boot_time_ns()
            session.last_flush_events.append(
                (
                    timestamp,
                    data_sources_event_packet(
                        self._packet_writer,
                        timestamp,
                        TracingServiceEvent_last_flush_slow_data_sources_ID,
                        slow[:MAX_LISTED_DATA_SOURCES],
                    ),
                )
            )
        self._complete_flush(session_id, pending.callback, success=success)

    def _complete_flush(
        self, session_id: int, callback: Callable[[bool], None], *, success: bool
    ) -> None:
        session = self.session(session_id)
        if session is None:
            callback(False)
            return
        self._scrape_all(session)
        self._maybe_snapshot_clocks(session)
        session.record_lifecycle_event(
            TracingServiceEvent_all_data_sources_flushed_ID, boot_time_ns()
        )
        if success:
            session.flushes_succeeded += 1
        else:
            session.flushes_failed += 1
        callback(success)

    def flush_and_disable_tracing(self, session_id: int) -> None:
        """The final flush, then stop (or end the session if its consumer detached)."""

        def done(success: bool) -> None:
            session = self.session(session_id)
            if session is None:
                return
            session.final_flush_outcome = (
                TraceStats.FINAL_FLUSH_SUCCEEDED if success else TraceStats.FINAL_FLUSH_FAILED
            )
            if session.consumer is not None:
                self.disable_tracing(session_id)
            else:
                self.free_buffers(session_id)

        self.flush(
            session_id, 0, done, flush_flags(FLUSH_INITIATOR_TRACED, FLUSH_REASON_TRACE_STOP)
        )

    def _schedule_periodic_flush(self, session: TracingSession) -> None:
        session_id = session.id
        period = session.periodic_flush_ms
        self._task_runner.post_delayed_task(
            lambda: self._periodic_flush_task(session_id), self._delay_to_next_period(period)
        )

    def _periodic_flush_task(self, session_id: int) -> None:
        session = self.session(session_id)
        if session is None or session.state is not SessionState.STARTED:
            return
        self._schedule_periodic_flush(session)
        self.flush(
            session_id,
            0,
            lambda _success: None,
            flush_flags(FLUSH_INITIATOR_TRACED, FLUSH_REASON_PERIODIC),
        )

    def _schedule_clear_incremental_state(self, session: TracingSession) -> None:
        session_id = session.id
        period = session.config.incremental_state_config.clear_period_ms
        self._task_runner.post_delayed_task(
            lambda: self._clear_incremental_state_task(session_id),
            self._delay_to_next_period(period),
        )

    def _clear_incremental_state_task(self, session_id: int) -> None:
        session = self.session(session_id)
        if session is None or session.state is not SessionState.STARTED:
            return
        self._schedule_clear_incremental_state(session)
        by_producer: dict[int, list[int]] = {}
        for instance in session.data_source_instances:
            if instance.handles_incremental_state_clear:
                by_producer.setdefault(instance.producer_id, []).append(instance.instance_id)
        for producer_id, instance_ids in by_producer.items():
            endpoint = self._producers.get(producer_id)
            if endpoint is not None:
                endpoint.send_clear_incremental_state(instance_ids)

    # Triggers ------------------------------------------------------------------------------

    def activate_triggers(self, endpoint: ProducerEndpointImpl, names: Sequence[str]) -> None:
        """Fires triggers: START_TRACING starts, STOP_TRACING stops after stop_delay_ms."""
        now = boot_time_ns()
        for name in names:
            name_hash = hashlib.sha1(name.encode(), usedforsecurity=False).digest()
            self._trigger_history = [
                (ts, h) for ts, h in self._trigger_history if now - ts <= _TRIGGER_WINDOW_NS
            ]
            count_in_window = sum(1 for _, h in self._trigger_history if h == name_hash)
            matched = False
            for session in list(self._sessions.values()):
                trigger = next(
                    (t for t in session.config.trigger_config.triggers if t.name == name), None
                )
                if trigger is None:
                    continue
                if trigger.producer_name_regex and not name_matches(
                    endpoint.name, (), (trigger.producer_name_regex,)
                ):
                    continue
                if random.random() < trigger.skip_probability:
                    continue
                if trigger.max_per_24_h > 0 and count_in_window >= trigger.max_per_24_h:
                    continue
                matched = True
                already_triggered = bool(session.received_triggers)
                self._maybe_snapshot_clocks(session)
                session.received_triggers.append(
                    TriggerInfo(
                        now, trigger.name, endpoint.name, endpoint.uid, trigger.stop_delay_ms
                    )
                )
                mode = session.trigger_mode
                session_id = session.id
                if mode == _TRIGGER_START and session.state is SessionState.CONFIGURED:
                    session.config.duration_ms = trigger.stop_delay_ms
                    self.start_tracing(session_id)
                elif mode == _TRIGGER_STOP and not already_triggered:
                    self._task_runner.post_delayed_task(
                        functools.partial(self._flush_and_disable_if_alive, session_id),
                        trigger.stop_delay_ms,
                    )
                elif mode == _TRIGGER_CLONE and session.consumer is not None:
                    notify = session.consumer.on_clone_trigger_hit
                    hit = (session_id, session.received_triggers[-1])
                    self._task_runner.post_delayed_task(
                        functools.partial(notify, *hit), trigger.stop_delay_ms
                    )
            if matched:
                self._trigger_history.append((now, name_hash))

    def _flush_and_disable_if_alive(self, session_id: int) -> None:
        if self.session(session_id) is not None:
            self.flush_and_disable_tracing(session_id)

    # Reading -------------------------------------------------------------------------------

    def read_buffers_into_consumer(self, session_id: int, consumer: ConsumerEndpointImpl) -> bool:
        """Sends the next part of the session's data to `consumer`; False if it cannot read."""
        session = self.session(session_id)
        if session is None or session.file_writer is not None:
            return False
        if session.state is not SessionState.CLONED_READ_ONLY and (
            session.is_waiting_for_trigger() or session.trigger_mode == _TRIGGER_CLONE
        ):
            return False
        on_trace_replies: Callable[[list[bytes], bool], None] | None = getattr(
            consumer.consumer, "on_trace_replies", None
        )
        if on_trace_replies is None:
            packets, has_more = self.read_buffers(session, READ_BUFFERS_BYTES_PER_TASK)
            consumer.consumer.on_trace_data(packets, has_more)
        else:
            replies, has_more = self._reader.read_replies(session, READ_BUFFERS_BYTES_PER_TASK)
            on_trace_replies(replies, has_more)
        if has_more:

            def next_part() -> None:
                if not consumer.connected:
                    return
                if consumer.tracing_session_id != session_id or not (
                    self.read_buffers_into_consumer(session_id, consumer)
                ):
                    # The session went away mid-read: end the stream.
                    consumer.consumer.on_trace_data([], False)

            # The next part is read once the consumer took this one (upstream's socket pacing).
            when_ready: Callable[[Callable[[], None]], None] | None = getattr(
                consumer.consumer, "when_ready_for_trace_data", None
            )
            if when_ready is None:
                self._task_runner.post_task(next_part)
            else:
                when_ready(lambda: self._task_runner.post_task(next_part))
        return True

    def _read_into_file_task(self, session_id: int, flush_first: bool) -> None:
        self.read_buffers_into_file(session_id, flush_first=flush_first)

    def read_buffers_into_file(self, session_id: int, *, flush_first: bool) -> bool:
        """Drains the session into its file (after a flush if `flush_first`)."""
        session = self.session(session_id)
        if session is None or session.file_writer is None or session.is_waiting_for_trigger():
            return False

        def drain(_success: bool = True) -> None:
            current = self.session(session_id)
            writer = current.file_writer if current is not None else None
            # A retry already scheduled goes on from where it is.
            if current is not None and writer is not None and not writer.retry_scheduled:
                self._drain_into_file(current, flush_first)

        if flush_first:
            self.flush(
                session_id, 0, drain, flush_flags(FLUSH_INITIATOR_TRACED, FLUSH_REASON_PERIODIC)
            )
        else:
            drain()
        return True

    def _drain_into_file(self, session: TracingSession, flush_first: bool) -> None:
        """Writes what the file's reader takes without blocking; waits for a pipe's reader."""
        writer = session.file_writer
        assert writer is not None
        writer.write_pending()
        has_more = True
        while has_more and not writer.pending and not writer.done:
            data, has_more = self.read_buffers_as_trace(session, WRITE_INTO_FILE_BYTES_PER_READ)
            writer.write(data)
        if writer.pending and not writer.done:
            if writer.idle_seconds() < self._file_write_timeout_s:
                writer.retry_scheduled = True
                self._task_runner.post_delayed_task(
                    functools.partial(self._retry_file_write, session.id, flush_first),
                    WRITE_RETRY_MS,
                )
                return
            writer.fail(
                f"{TRACE_FILE_WRITE_FAILED} {writer.path}: its reader took nothing for "
                f"{self._file_write_timeout_s:g} s"
            )
        if writer.done or session.write_period_ms == 0:
            self._finish_file(session)
            return
        self._task_runner.post_delayed_task(
            functools.partial(self._read_into_file_task, session.id, flush_first),
            self._delay_to_next_period(session.write_period_ms),
        )

    def _retry_file_write(self, session_id: int, flush_first: bool) -> None:
        session = self.session(session_id)
        if session is not None and session.file_writer is not None:
            session.file_writer.retry_scheduled = False
            self._drain_into_file(session, flush_first)

    def _finish_file(self, session: TracingSession) -> None:
        """Closes the session's file; a write error ends the session with that error."""
        writer = session.file_writer
        assert writer is not None
        writer.close()
        session.file_writer = None
        session.write_period_ms = 0
        if writer.error:
            _log.error("Tracing session %d: %s", session.id, writer.error)
            session.end_error = session.end_error or writer.error
        if session.state is SessionState.STARTED:
            self.disable_tracing(session.id, error=writer.error)
        elif session.state is SessionState.DISABLED and session.consumer is not None:
            session.consumer.notify_on_tracing_disabled(session.end_error)

    def read_buffers(
        self, session: TracingSession, threshold: int
    ) -> tuple[list[Sequence[bytes | memoryview]], bool]:
        """Reads about `threshold` bytes of the session (see `SessionReader.read_packets`)."""
        return self._reader.read_packets(session, threshold)

    def read_buffers_as_trace(self, session: TracingSession, threshold: int) -> tuple[bytes, bool]:
        """`read_buffers`, framed as trace-file bytes (what write_into_file writes)."""
        return self._reader.read_trace(session, threshold)

    # Queries -------------------------------------------------------------------------------

    def trace_stats(self, session: TracingSession) -> TraceStats:
        """The session's TraceStats (service-wide counters included)."""
        stats = TraceStats(
            producers_connected=len(self._producers),
            producers_seen=self._last_producer_id,
            data_sources_registered=len(self._data_sources),
            data_sources_seen=self._last_instance_id,
            tracing_sessions=len(self._sessions),
            total_buffers=len(self._buffers),
            chunks_discarded=self.chunks_discarded,
            patches_discarded=self.patches_discarded,
            invalid_packets=session.invalid_packets,
            flushes_requested=session.flushes_requested,
            flushes_succeeded=session.flushes_succeeded,
            flushes_failed=session.flushes_failed,
            final_flush_outcome=session.final_flush_outcome,
        )
        buffers = [self._buffers.get(b) for b in session.buffers_index]
        for buffer in buffers:
            if buffer is not None:
                stats.buffer_stats.append(buffer.stats.to_proto())
        if session.config.builtin_data_sources.disable_chunk_usage_histograms:
            return stats
        for index, buffer in enumerate(buffers):
            if buffer is None:
                continue
            for (producer_id, writer_id), histogram in buffer.writer_stats.items():
                if not stats.chunk_payload_histogram_def:
                    stats.chunk_payload_histogram_def.extend(CHUNK_PAYLOAD_HISTOGRAM_THRESHOLDS)
                writer_stats = stats.writer_stats.add()
                writer_stats.sequence_id = session.trusted_fields.sequence_id(
                    0, producer_id, writer_id
                )
                writer_stats.buffer = index
                writer_stats.chunk_payload_histogram_counts.extend(histogram.counts)
                writer_stats.chunk_payload_histogram_sum.extend(histogram.sums)
        return stats

    def service_state(self, uid: int, *, sessions_only: bool) -> TracingServiceState:
        """What QueryServiceState reports to a consumer of `uid`."""
        state = TracingServiceState(
            tracing_service_version=_tracing_service_version(),
            num_sessions=len(self._sessions),
            num_sessions_started=sum(
                1 for s in self._sessions.values() if s.state is SessionState.STARTED
            ),
            supports_tracing_sessions=True,
        )
        if not sessions_only:
            for producer_id, endpoint in self._producers.items():
                producer = state.producers.add(
                    id=producer_id,
                    name=endpoint.name,
                    sdk_version=endpoint.sdk_version,
                    uid=endpoint.uid,
                    pid=endpoint.identity.pid,
                    frozen=False,
                )
                if endpoint.identity.machine_id:
                    producer.machine_id = endpoint.identity.machine_id
            for registered in self._data_sources:
                data_source = state.data_sources.add(producer_id=registered.producer_id)
                data_source.ds_descriptor.CopyFrom(registered.descriptor)
        for session in self._sessions.values():
            if uid not in (0, session.consumer_uid):
                continue
            entry = state.tracing_sessions.add(
                id=session.id,
                consumer_uid=session.consumer_uid,
                duration_ms=session.config.duration_ms,
                num_data_sources=len(session.data_source_instances),
                unique_session_name=session.config.unique_session_name,
                state=session.state.value,
            )
            if session.config.HasField("bugreport_score"):
                entry.bugreport_score = session.config.bugreport_score
            if session.config.HasField("bugreport_filename"):
                entry.bugreport_filename = session.config.bugreport_filename
            entry.buffer_size_kb.extend(b.size_kb for b in session.config.buffers)
            if session.state is SessionState.STARTED:
                entry.is_started = True
        return state

    @staticmethod
    def capabilities() -> TracingServiceCapabilities:
        """What QueryCapabilities reports."""
        return TracingServiceCapabilities(
            has_query_capabilities=True,
            has_trace_config_output_path=True,
            has_clone_session=True,
            observable_events=[
                ObservableEvents.TYPE_DATA_SOURCES_INSTANCES,
                ObservableEvents.TYPE_ALL_DATA_SOURCES_STARTED,
                ObservableEvents.TYPE_CLONE_TRIGGER_HIT,
            ],
        )


def _stats_summary(stats: TraceStats) -> str:
    """The figures of a session's TraceStats a log line shows."""
    buffers = stats.buffer_stats
    return (
        f"bytes written:{sum(b.bytes_written for b in buffers)}, "
        f"chunks written:{sum(b.chunks_written for b in buffers)}, "
        f"chunks overwritten:{sum(b.chunks_overwritten for b in buffers)}, "
        f"chunks discarded:{sum(b.chunks_discarded for b in buffers)}, "
        f"invalid packets:{stats.invalid_packets}, "
        f"flushes:{stats.flushes_succeeded}/{stats.flushes_requested} succeeded"
    )


def _drifted(old: ClockSnapshot, new: ClockSnapshot) -> bool:
    """Whether any clock moved by >= 10 ms relative to BOOTTIME between two snapshots."""
    boot_diff = new[0].timestamp - old[0].timestamp
    return any(
        abs(boot_diff - (n.timestamp - o.timestamp)) >= _SIGNIFICANT_DRIFT_NS
        for o, n in zip(old[1:], new[1:], strict=False)
    )
