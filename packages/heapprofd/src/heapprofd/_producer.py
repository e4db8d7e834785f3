"""The heapprofd producer: the `android.heapprofd` data source, on the daemon's main thread.

Producer callbacks arrive on the IPC thread and are posted to the main `TaskRunner`, which
owns every data source instance, the listening socket, the handshakes, the bookkeeping and
the dumps. Each connected client gets an `Unwinder` thread; they talk only through posted
tasks.
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from perfetto_protos.common.data_source_descriptor_pb2 import DataSourceDescriptor
from perfetto_protos.config.data_source_config_pb2 import DataSourceConfig
from perfetto_protos.config.profiling.heapprofd_config_pb2 import HeapprofdConfig
from perfetto_service import ProducerIPCClient

from heapprofd._bookkeeping import (
    MAX_HEAPS_PER_PROCESS,
    HeapTracker,
    ProcessState,
    monotonic_coarse_ns,
)
from heapprofd._dump import DumpState
from heapprofd._preload import NATIVE_HEAP
from heapprofd._process_matcher import (
    PROFILING_SIGNAL,
    cmdline_matches,
    has_profiling_handler,
    list_pids,
    read_cmdline,
    read_cwd,
)
from heapprofd._task_runner import TaskRunner
from heapprofd._unwinder import ClientEnd, RecordBatch, Unwinder
from heapprofd._wire import ClientConfiguration, receive_handshake, send_configuration

__all__ = ["DATA_SOURCE_NAME", "HeapprofdProducer", "client_configuration"]

_log = logging.getLogger("heapprofd")

DATA_SOURCE_NAME = "android.heapprofd"
DEFAULT_HEAP = "python"
DEFAULT_INTERVAL = 4096
DEFAULT_SHMEM_SIZE = 8 * 1024 * 1024
MAX_SHMEM_SIZE = 512 * 1024 * 1024
_GUARDRAIL_CHECK_MS = 1000
_STOP_TIMEOUT_MS = 4000
_HANDSHAKE_TIMEOUT_S = 1.0
_RECONNECT_MS = 1000
ERROR_HIT_TIMEOUT = 1
"""SharedRingBuffer error state: the client could not write a record (buffer full)."""
_CLIENT_ERRORS = (1, 2)


def client_configuration(config: HeapprofdConfig) -> ClientConfiguration:
    """The ClientConfiguration a HeapprofdConfig gives its clients (upstream's rules)."""
    default = config.sampling_interval_bytes or DEFAULT_INTERVAL
    heaps: list[tuple[str, int]] = []
    intervals = list(config.heap_sampling_intervals)
    for i, name in enumerate(config.heaps):
        heaps.append((name, intervals[i] if i < len(intervals) and intervals[i] else default))
    if not config.heaps and not config.all_heaps:
        heaps.append((DEFAULT_HEAP, default))
    for name in config.exclude_heaps:
        heaps.append((name, 0))
    return ClientConfiguration(
        default_interval=default,
        block_client_timeout_us=config.block_client_timeout_us,
        adaptive_sampling_shmem_threshold=config.adaptive_sampling_shmem_threshold,
        adaptive_sampling_max_sampling_interval_bytes=(
            config.adaptive_sampling_max_sampling_interval_bytes
        ),
        heaps=heaps,
        block_client=config.block_client,
        disable_fork_teardown=config.disable_fork_teardown,
        disable_vfork_detection=config.disable_vfork_detection,
        all_heaps=config.all_heaps,
    )


def shmem_size(requested: int) -> int:
    """The ring buffer size: a power-of-two number of pages (upstream's default 8 MiB)."""
    if not requested:
        return DEFAULT_SHMEM_SIZE
    size = mmap.PAGESIZE
    while size < requested and size < MAX_SHMEM_SIZE:
        size *= 2
    return size


@dataclass
class DataSourceInstance:
    """One started `android.heapprofd` data source."""

    instance_id: int
    config: HeapprofdConfig
    client_config: ClientConfiguration
    dump_state: DumpState
    writer: object
    signalled: set[int] = field(default_factory=set)
    processes: dict[int, ProcessState] = field(default_factory=dict)
    unwinders: dict[int, Unwinder] = field(default_factory=dict)
    stopping: bool = False
    stopped: bool = False
    hit_guardrail: bool = False
    cpu_at_start: float = 0.0

    def targets(self, pid: int) -> bool:
        config = self.config
        if config.all or pid in config.pid:
            return True
        if config.process_cmdline:
            argv = read_cmdline(pid)
            return argv is not None and cmdline_matches(config.process_cmdline, argv, read_cwd(pid))
        return False


class HeapprofdProducer:
    """The daemon's main-thread state; `start()` connects and listens."""

    def __init__(self, runner: TaskRunner, producer_socket: str, listen_socket: str) -> None:
        self._runner = runner
        self._producer_socket = producer_socket
        self._listen_path = listen_socket
        self._listener: socket.socket | None = None
        self._endpoint: ProducerIPCClient | None = None
        self._instances: dict[int, DataSourceInstance] = {}
        self._next_connection = 1
        self._pending: set[socket.socket] = set()
        self.on_registered: list[Callable[[], None]] = []

    # Set-up, on the main thread.

    def start(self) -> None:
        self._listen()
        self._connect()

    def _listen(self) -> None:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        if os.path.exists(self._listen_path):
            os.unlink(self._listen_path)
        listener.bind(self._listen_path)
        os.chmod(self._listen_path, 0o666)
        listener.listen(64)
        listener.setblocking(False)
        self._listener = listener
        self._runner.add_fd_watch(listener.fileno(), self._accept)

    def _connect(self) -> None:
        self._endpoint = ProducerIPCClient(
            self._producer_socket, _ProducerAdapter(self), "heapprofd", retry=True
        )
        self._endpoint.connect()

    def close(self) -> None:
        for instance in list(self._instances.values()):
            for unwinder in instance.unwinders.values():
                unwinder.shutdown()
        if self._endpoint is not None:
            self._endpoint.disconnect()
        if self._listener is not None:
            self._runner.remove_fd_watch(self._listener.fileno())
            self._listener.close()
            with contextlib.suppress(OSError):
                os.unlink(self._listen_path)

    # Producer callbacks (posted from the IPC thread).

    def on_connect(self) -> None:
        endpoint = self._endpoint
        assert endpoint is not None
        endpoint.register_data_source(
            DataSourceDescriptor(
                name=DATA_SOURCE_NAME, will_notify_on_start=True, will_notify_on_stop=True
            )
        )
        endpoint.sync(lambda: self._runner.post_task(self._registered))

    def _registered(self) -> None:
        _log.info("registered %s", DATA_SOURCE_NAME)
        for callback in self.on_registered:
            callback()

    def on_disconnect(self) -> None:
        _log.warning("lost the connection to the tracing service; reconnecting")
        for instance_id in list(self._instances):
            self._abandon(instance_id)
        self._runner.post_delayed_task(self._connect, _RECONNECT_MS)

    def start_data_source(self, instance_id: int, config: DataSourceConfig) -> None:
        endpoint = self._endpoint
        if endpoint is None or instance_id in self._instances:
            return
        heap_config = config.heapprofd_config
        writer = endpoint.create_trace_writer(config.target_buffer)
        instance = DataSourceInstance(
            instance_id=instance_id,
            config=heap_config,
            client_config=client_configuration(heap_config),
            dump_state=DumpState(writer.write_packet, heap_config.dump_at_max),
            writer=writer,
            cpu_at_start=_cpu_seconds(),
        )
        self._instances[instance_id] = instance
        _log.info("data source %d started", instance_id)
        if not heap_config.no_running:
            self._signal_running(instance)
        dumps = heap_config.continuous_dump_config
        if dumps.dump_interval_ms:
            delay = dumps.dump_phase_ms or dumps.dump_interval_ms
            self._runner.post_delayed_task(lambda: self._periodic_dump(instance_id), delay)
        if heap_config.max_heapprofd_memory_kb or heap_config.max_heapprofd_cpu_secs:
            self._runner.post_delayed_task(
                lambda: self._check_guardrails(instance_id), _GUARDRAIL_CHECK_MS
            )
        endpoint.notify_data_source_started(instance_id)

    def stop_data_source(self, instance_id: int) -> None:
        instance = self._instances.get(instance_id)
        if instance is None:
            if self._endpoint is not None:
                self._endpoint.notify_data_source_stopped(instance_id)
            return
        instance.stopping = True
        for unwinder in instance.unwinders.values():
            unwinder.shutdown()
        if not instance.unwinders:
            self._finish_stop(instance)
        else:
            self._runner.post_delayed_task(lambda: self._finish_stop(instance), _STOP_TIMEOUT_MS)

    def flush(self, request_id: int, instance_ids: Sequence[int]) -> None:
        endpoint = self._endpoint
        if endpoint is None:
            return
        for instance_id in instance_ids:
            instance = self._instances.get(instance_id)
            if instance is not None:
                instance.writer.flush()  # type: ignore[attr-defined]
        endpoint.notify_flush_complete(request_id)

    # Data sources.

    def _signal_running(self, instance: DataSourceInstance) -> None:
        own = os.getpid()
        for pid in list_pids():
            if pid == own or not instance.targets(pid) or not has_profiling_handler(pid):
                continue
            if any(pid in other.unwinders for other in self._instances.values()):
                # upstream's rule: a process profiled by another session is rejected
                instance.processes.setdefault(
                    pid, ProcessState(pid, False, self._connection_id())
                ).rejected_concurrent = True
                continue
            try:
                os.kill(pid, PROFILING_SIGNAL)
            except OSError:
                continue
            instance.signalled.add(pid)

    def _periodic_dump(self, instance_id: int) -> None:
        instance = self._instances.get(instance_id)
        if instance is None or instance.stopping:
            return
        instance.dump_state.dump(instance.processes.values())
        instance.writer.flush()  # type: ignore[attr-defined]
        interval = instance.config.continuous_dump_config.dump_interval_ms
        self._runner.post_delayed_task(lambda: self._periodic_dump(instance_id), interval)

    def _check_guardrails(self, instance_id: int) -> None:
        instance = self._instances.get(instance_id)
        if instance is None or instance.stopping or instance.hit_guardrail:
            return
        config = instance.config
        hit = False
        if config.max_heapprofd_cpu_secs:
            hit = _cpu_seconds() - instance.cpu_at_start > config.max_heapprofd_cpu_secs
        if config.max_heapprofd_memory_kb and not hit:
            hit = _rss_kb() > config.max_heapprofd_memory_kb
        if not hit:
            self._runner.post_delayed_task(
                lambda: self._check_guardrails(instance_id), _GUARDRAIL_CHECK_MS
            )
            return
        _log.warning("data source %d hit a guardrail; profiling stops", instance_id)
        instance.hit_guardrail = True
        for process in instance.processes.values():
            process.hit_guardrail = True
        for unwinder in instance.unwinders.values():
            unwinder.shutdown()

    def _finish_stop(self, instance: DataSourceInstance) -> None:
        if instance.stopped:
            return
        instance.stopped = True
        self._instances.pop(instance.instance_id, None)
        try:
            instance.dump_state.dump(instance.processes.values(), instance.hit_guardrail)
            instance.writer.flush()  # type: ignore[attr-defined]
        finally:
            if self._endpoint is not None:
                self._endpoint.notify_data_source_stopped(instance.instance_id)
        _log.info("data source %d stopped", instance.instance_id)

    def _abandon(self, instance_id: int) -> None:
        instance = self._instances.pop(instance_id, None)
        if instance is None:
            return
        instance.stopped = True
        for unwinder in instance.unwinders.values():
            unwinder.shutdown()

    # Clients.

    def _accept(self) -> None:
        assert self._listener is not None
        try:
            conn, _addr = self._listener.accept()
        except OSError:
            return
        conn.setblocking(False)
        self._pending.add(conn)
        self._runner.add_fd_watch(conn.fileno(), lambda: self._handshake(conn))
        self._runner.post_delayed_task(
            lambda: self._handshake_timeout(conn), int(_HANDSHAKE_TIMEOUT_S * 1000)
        )

    def _handshake_timeout(self, conn: socket.socket) -> None:
        if conn in self._pending:
            self._pending.discard(conn)
            self._runner.remove_fd_watch(conn.fileno())
            conn.close()

    def _handshake(self, conn: socket.socket) -> None:
        self._pending.discard(conn)
        self._runner.remove_fd_watch(conn.fileno())
        try:
            received = receive_handshake(conn)
        except OSError:
            received = None
        if received is None:
            conn.close()
            return
        pid, maps_fd, mem_fd = received
        instance = self._match(pid)
        if instance is None:
            _log.info("pid %d connected but no session wants it", pid)
            os.close(maps_fd)
            os.close(mem_fd)
            conn.close()
            return
        self._start_client(instance, pid, conn, (maps_fd, mem_fd))

    def _match(self, pid: int) -> DataSourceInstance | None:
        for instance in self._instances.values():
            if instance.stopping or instance.hit_guardrail or not instance.targets(pid):
                continue
            from_startup = pid not in instance.signalled
            if from_startup and instance.config.no_startup:
                continue
            if any(pid in other.unwinders for other in self._instances.values()):
                state = instance.processes.setdefault(
                    pid, ProcessState(pid, from_startup, self._connection_id())
                )
                state.rejected_concurrent = True
                continue
            if pid in instance.unwinders:
                continue
            return instance
        return None

    def _connection_id(self) -> int:
        self._next_connection += 1
        return self._next_connection

    def _start_client(
        self,
        instance: DataSourceInstance,
        pid: int,
        conn: socket.socket,
        proc_fds: tuple[int, int],
    ) -> None:
        from heapprofd._native import SharedRingBuffer

        try:
            ring = SharedRingBuffer.create(shmem_size(instance.config.shmem_size_bytes))
        except (OSError, ValueError) as exc:
            _log.error("pid %d: cannot create its ring buffer: %s", pid, exc)
            for fd in proc_fds:
                os.close(fd)
            conn.close()
            return
        conn.setblocking(True)
        conn.settimeout(_HANDSHAKE_TIMEOUT_S)
        try:
            send_configuration(conn, instance.client_config, ring.fd)
        except OSError as exc:
            _log.info("pid %d: handshake failed: %s", pid, exc)
            ring.close()
            for fd in proc_fds:
                os.close(fd)
            conn.close()
            return
        state = ProcessState(
            pid,
            pid not in instance.signalled,
            self._connection_id(),
            start_timestamp=monotonic_coarse_ns(),
        )
        instance.processes[pid] = state
        runner = self._runner

        def post_batch(batch: RecordBatch) -> None:
            runner.post_task(lambda: self._on_batch(instance, state, batch))

        def post_end(end: ClientEnd) -> None:
            runner.post_task(lambda: self._on_end(instance, state, end))

        unwinder = Unwinder(
            pid,
            conn,
            ring=ring,
            proc_fds=proc_fds,
            post_batch=post_batch,
            post_end=post_end,
            native=instance.client_config.interval_for(NATIVE_HEAP) > 0,
        )
        instance.unwinders[pid] = unwinder
        unwinder.start()
        _log.info("pid %d connected (%s)", pid, "startup" if state.from_startup else "running")

    def _on_batch(
        self, instance: DataSourceInstance, state: ProcessState, batch: RecordBatch
    ) -> None:
        refused = state.refused_heap_records
        for heap_id, name, interval in batch.heap_names:
            state.name_heap(heap_id, name, interval, instance.config.dump_at_max)
        for fid, name, path, line in batch.frames:
            state.frames[fid] = (name, path, line)
        for fid, native_frame in batch.native_frames:
            state.native_frames[fid] = native_frame
        for cs, stack in batch.callstacks:
            state.callstacks[cs] = stack
        state.unwinding_errors += batch.unwinding_errors
        heaps = state.heaps
        tracker: HeapTracker | None = None
        tracker_id = -1
        for event in batch.events:
            heap_id = event[0]
            if heap_id != tracker_id:
                tracker = heaps.get(heap_id) or state.heap(heap_id)
                tracker_id = heap_id
            elif tracker is None:
                state.refused_heap_records += 1
            if tracker is None:
                continue
            if len(event) == 4:
                tracker.malloc(event[3], event[1], event[2])
            else:
                tracker.free(event[1])
        if refused == 0 and state.refused_heap_records:
            _log.warning(
                "pid %d: more than %d heaps; the records of further heaps are refused",
                state.pid,
                MAX_HEAPS_PER_PROCESS,
            )

    def _on_end(self, instance: DataSourceInstance, state: ProcessState, end: ClientEnd) -> None:
        stats = end.stats
        error_state = stats["error_state"]
        state.disconnected = not end.by_daemon
        state.buffer_overran = error_state == ERROR_HIT_TIMEOUT
        state.client_error = error_state if error_state in _CLIENT_ERRORS else 0
        state.buffer_corrupted = (
            end.corrupt or stats["num_writes_corrupt"] > 0 or stats["num_reads_corrupt"] > 0
        )
        state.spinlock_blocked_us = stats["client_spinlock_blocked_us"]
        instance.unwinders.pop(state.pid, None)
        _log.info("pid %d %s", state.pid, "disconnected" if state.disconnected else "stopped")
        if state.refused_heap_records:
            _log.warning(
                "pid %d: %d records of heaps past the bound of %d heaps per process were refused",
                state.pid,
                state.refused_heap_records,
                MAX_HEAPS_PER_PROCESS,
            )
        if instance.stopped:
            return
        # as upstream: a client's state is dumped when its connection ends
        if instance.processes.get(state.pid) is state:
            instance.dump_state.dump([state])
            instance.writer.flush()  # type: ignore[attr-defined]
            del instance.processes[state.pid]
        if instance.stopping and not instance.unwinders:
            self._finish_stop(instance)


class _ProducerAdapter:
    """The `perfetto_service.Producer` the IPC thread calls; posts to the main thread."""

    def __init__(self, producer: HeapprofdProducer) -> None:
        self._producer = producer
        self._post = producer._runner.post_task

    def on_connect(self) -> None:
        self._post(self._producer.on_connect)

    def on_disconnect(self) -> None:
        self._post(self._producer.on_disconnect)

    def on_tracing_setup(self) -> None:
        pass

    def setup_data_source(self, instance_id: int, config: DataSourceConfig) -> None:
        pass

    def start_data_source(self, instance_id: int, config: DataSourceConfig) -> None:
        self._post(lambda: self._producer.start_data_source(instance_id, config))

    def stop_data_source(self, instance_id: int) -> None:
        self._post(lambda: self._producer.stop_data_source(instance_id))

    def flush(self, request_id: int, instance_ids: Sequence[int], flags: int) -> None:
        ids = list(instance_ids)
        self._post(lambda: self._producer.flush(request_id, ids))

    def clear_incremental_state(self, instance_ids: Sequence[int]) -> None:
        pass


def _cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system


def _rss_kb() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0
