"""The traced_probes producer: upstream's probes data sources on traced's producer socket.

Producer callbacks arrive on the IPC thread and are posted to one asyncio loop, which owns
every data source instance and its TraceWriter, and polls each at the deadline it returned.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from perfetto_probes import DATA_SOURCES, ProbesDataSource, ProbesError, data_source_factory
from perfetto_protos.common.data_source_descriptor_pb2 import DataSourceDescriptor
from perfetto_protos.config.data_source_config_pb2 import DataSourceConfig
from perfetto_smb import TraceWriter

from perfetto_service._errors import ServiceError
from perfetto_service.ipc.producer._producer_ipc_client import ProducerIPCClient

__all__ = ["PRODUCER_NAME", "ProbesProducer"]

_log = logging.getLogger("traced_probes")

PRODUCER_NAME = "perfetto.traced_probes"
"""The producer name upstream's traced_probes connects as."""


def _boottime_ns() -> int:
    return time.clock_gettime_ns(time.CLOCK_BOOTTIME)


@dataclass
class _Instance:
    """One started data source instance (None: it failed to start, and records nothing)."""

    name: str
    session_id: int
    data_source: ProbesDataSource | None
    writer: TraceWriter | None = None
    timer: asyncio.TimerHandle | None = field(default=None, repr=False)


class ProbesProducer:
    """traced_probes' state, on the loop's thread; `connect()` starts it."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        producer_socket: str,
        on_ready: Callable[[], None],
        on_disconnect: Callable[[], None],
    ) -> None:
        self._loop = loop
        self._socket = producer_socket
        self._on_ready = on_ready
        self._on_lost = on_disconnect
        self._endpoint: ProducerIPCClient | None = None
        self._instances: dict[int, _Instance] = {}

    def connect(self) -> None:
        """Connects (retrying until traced answers) and registers every data source."""
        self._endpoint = ProducerIPCClient(
            self._socket, _ProducerAdapter(self), PRODUCER_NAME, retry=True
        )
        self._endpoint.connect()

    def close(self) -> None:
        """Stops every instance (restoring what it changed), then disconnects."""
        for instance_id in list(self._instances):
            self._stop(instance_id, notify=False)
        if self._endpoint is not None:
            endpoint, self._endpoint = self._endpoint, None
            endpoint.disconnect()

    # Producer callbacks (posted from the IPC thread).

    def on_connect(self) -> None:
        endpoint = self._endpoint
        if endpoint is None:
            return
        for name in DATA_SOURCES:
            endpoint.register_data_source(
                DataSourceDescriptor(name=name, will_notify_on_start=True, will_notify_on_stop=True)
            )
        endpoint.sync(self._post_registered)

    def _post_registered(self) -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed: traced_probes is exiting
            self._loop.call_soon_threadsafe(self._registered)

    def _registered(self) -> None:
        self._on_ready()
        _log.info("registered %s", ", ".join(DATA_SOURCES))

    def on_disconnect(self) -> None:
        if self._endpoint is None:
            return  # our own close()
        _log.info("the tracing service went away")
        self._on_lost()

    def start_data_source(self, instance_id: int, config: DataSourceConfig) -> None:
        endpoint = self._endpoint
        if endpoint is None or instance_id in self._instances:
            return
        name = config.name
        instance = _Instance(name, config.tracing_session_id, None)
        self._instances[instance_id] = instance
        try:
            factory = data_source_factory(name)
            instance.writer = endpoint.create_trace_writer(config.target_buffer)
            data_source = factory(config, instance.writer.write_packet)
            data_source.start()
        except (ProbesError, ServiceError) as exc:
            _log.error("%s: %s", name, exc)
        except ImportError as exc:
            _log.error("%s: not available in this installation (%s)", name, exc)
        except Exception:  # a bug in the data source: it alone fails, with its traceback
            _log.exception("%s: failed to start", name)
        else:
            instance.data_source = data_source
            _log.info("%s: data source %d started", name, instance_id)
            self._poll(instance_id)
        endpoint.notify_data_source_started(instance_id)

    def stop_data_source(self, instance_id: int) -> None:
        self._stop(instance_id, notify=True)

    def flush(self, request_id: int, instance_ids: Sequence[int]) -> None:
        endpoint = self._endpoint
        if endpoint is None:
            return
        instances = [self._instances[i] for i in instance_ids if i in self._instances]
        # What the data sources read last (threads ftrace saw among it) is routed before the
        # writers hand their chunks over, so that this flush carries it all.
        for instance in instances:
            if instance.data_source is not None:
                instance.data_source.flush()
        for instance in instances:
            self._route_pids(instance)
        for instance in instances:
            if instance.writer is not None:
                instance.writer.flush()
        endpoint.notify_flush_complete(request_id)

    # Instances.

    def _poll(self, instance_id: int) -> None:
        instance = self._instances.get(instance_id)
        if instance is None or instance.data_source is None:
            return
        instance.timer = None
        try:
            next_ns = instance.data_source.poll(_boottime_ns())
        except ProbesError as exc:  # it records nothing more; stop() still restores the host
            _log.error("%s: %s", instance.name, exc)
            return
        except Exception:
            _log.exception("%s: failed", instance.name)
            return
        self._route_pids(instance)
        if next_ns is not None:
            delay_s = max(next_ns - _boottime_ns(), 0) / 1e9
            instance.timer = self._loop.call_later(delay_s, self._poll, instance_id)

    def _route_pids(self, instance: _Instance) -> None:
        """Hands the threads an ftrace instance saw to the process_stats instances of its
        session."""
        take = getattr(instance.data_source, "take_seen_pids", None)
        if take is None:
            return
        pids: set[int] = take()
        if not pids:
            return
        for other in self._instances.values():
            on_pids = getattr(other.data_source, "on_pids", None)
            if on_pids is not None and other.session_id == instance.session_id:
                on_pids(pids)

    def _stop(self, instance_id: int, *, notify: bool) -> None:
        instance = self._instances.pop(instance_id, None)
        if instance is not None:
            if instance.timer is not None:
                instance.timer.cancel()
            if instance.data_source is not None:
                try:
                    instance.data_source.stop()
                except ProbesError as exc:
                    _log.error("%s: %s", instance.name, exc)
                _log.info("%s: data source %d stopped", instance.name, instance_id)
            if instance.writer is not None:
                instance.writer.flush()
        if notify and self._endpoint is not None:
            self._endpoint.notify_data_source_stopped(instance_id)


class _ProducerAdapter:
    """The `perfetto_service.Producer` the IPC thread calls; posts to the loop."""

    def __init__(self, producer: ProbesProducer) -> None:
        self._producer = producer
        self._loop = producer._loop

    def _post(self, callback: Callable[..., None], *args: object) -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed: traced_probes is exiting
            self._loop.call_soon_threadsafe(callback, *args)

    def on_connect(self) -> None:
        self._post(self._producer.on_connect)

    def on_disconnect(self) -> None:
        self._post(self._producer.on_disconnect)

    def on_tracing_setup(self) -> None:
        pass

    def setup_data_source(self, instance_id: int, config: DataSourceConfig) -> None:
        pass

    def start_data_source(self, instance_id: int, config: DataSourceConfig) -> None:
        self._post(self._producer.start_data_source, instance_id, config)

    def stop_data_source(self, instance_id: int) -> None:
        self._post(self._producer.stop_data_source, instance_id)

    def flush(self, request_id: int, instance_ids: Sequence[int], flags: int) -> None:
        self._post(self._producer.flush, request_id, list(instance_ids))

    def clear_incremental_state(self, instance_ids: Sequence[int]) -> None:
        pass
