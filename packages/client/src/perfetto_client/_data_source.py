"""Custom data sources: subclass `DataSource`, register it, write packets with `trace()`."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any, ClassVar

from perfetto_protos.common.data_source_descriptor_pb2 import DataSourceDescriptor
from perfetto_protos.config.data_source_config_pb2 import DataSourceConfig
from perfetto_protos.trace.trace_packet_pbzero import TracePacket
from perfetto_smb import BufferExhaustedPolicy, TraceWriter

from perfetto_client._errors import TracingError
from perfetto_client._producer import TracingProducer, exhausted_policy
from perfetto_client._tracing import register_kind

__all__ = ["DataSource", "FlushArgs", "StopArgs", "TraceContext"]


class StopArgs:
    """What `DataSource.on_stop` gets: call `handle_stop_asynchronously()` to stop later."""

    def __init__(self, done: Callable[[], None]) -> None:
        self._done = done
        self.deferred = False

    def handle_stop_asynchronously(self) -> Callable[[], None]:
        """Defers the stop: the session waits until the returned function is called."""
        self.deferred = True
        return self._done


class FlushArgs:
    """What `DataSource.on_flush` gets (the flush's flags, as the service sent them)."""

    def __init__(self, flags: int) -> None:
        self.flags = flags


class _Instance:
    """One running instance of a DataSource subclass in one session."""

    def __init__(
        self, source: DataSource, producer: TracingProducer, config: DataSourceConfig
    ) -> None:
        self.source = source
        self.producer = producer
        self.config = config
        self.incremental_generation = 0
        self.stopped = False


class TraceContext:
    """What a `DataSource.trace` callback gets: one instance, on the calling thread."""

    def __init__(self, instance: _Instance, writer: TraceWriter, slot: _ThreadSlot) -> None:
        self._instance = instance
        self._writer = writer
        self._slot = slot
        self.wrote = False

    @property
    def data_source(self) -> Any:
        """The DataSource object of this instance (its state, as set up by on_setup)."""
        return self._instance.source

    @property
    def config(self) -> DataSourceConfig:
        """The instance's DataSourceConfig."""
        return self._instance.config

    def new_trace_packet(self) -> TracePacket:
        """A new TracePacket (protozero writer) on this thread's sequence for this instance.

        It is finished by the next `new_trace_packet()` or when the `trace` callback returns.
        """
        self.wrote = True
        return self._writer.new_trace_packet()

    def flush(self, callback: Callable[[], None] | None = None) -> None:
        """Commits what this thread wrote for this instance."""
        self._writer.flush(callback)

    @property
    def incremental_state(self) -> Any:
        """This thread's incremental state for the instance: a new `IncrementalState()` after
        every clear (the sequence's interning, for instance, starts over)."""
        slot = self._slot
        if slot.generation != self._instance.incremental_generation or slot.incremental is None:
            slot.generation = self._instance.incremental_generation
            factory = type(self._instance.source).IncrementalState
            slot.incremental = factory()
            slot.incremental_was_cleared = True
        return slot.incremental

    @property
    def incremental_state_was_cleared(self) -> bool:
        """True once after the incremental state was (re)created: emit what it holds again."""
        self.incremental_state  # noqa: B018 - creates it if needed
        cleared = self._slot.incremental_was_cleared
        self._slot.incremental_was_cleared = False
        return cleared

    @property
    def thread_state(self) -> Any:
        """This thread's own state for the instance: a `ThreadState()` made on first use."""
        if self._slot.thread_state is None:
            self._slot.thread_state = type(self._instance.source).ThreadState()
        return self._slot.thread_state


class _ThreadSlot:
    """A thread's writer and states for one instance."""

    __slots__ = ("generation", "incremental", "incremental_was_cleared", "thread_state", "writer")

    def __init__(self, writer: TraceWriter) -> None:
        self.writer = writer
        self.generation = -1
        self.incremental: Any = None
        self.incremental_was_cleared = False
        self.thread_state: Any = None


class _Kind:
    """A registered DataSource subclass, as the producer sees it."""

    def __init__(self, cls: type[DataSource], descriptor: DataSourceDescriptor) -> None:
        self.cls = cls
        self.name = descriptor.name
        self._descriptor = descriptor

    def descriptor(self) -> DataSourceDescriptor:
        return self._descriptor

    def after_fork(self) -> None:
        """In a forked child: no instance of the parent's sessions runs here."""
        self.cls._active = ()
        self.cls._lock = threading.Lock()
        self.cls._tls = threading.local()

    def setup(
        self, producer: TracingProducer, instance_id: int, config: DataSourceConfig
    ) -> _Handle:
        source = self.cls()
        source.on_setup(config)
        return _Handle(self.cls, _Instance(source, producer, config))


class _Handle:
    def __init__(self, cls: type[DataSource], instance: _Instance) -> None:
        self.cls = cls
        self.instance = instance

    def start(self) -> None:
        self.instance.source.on_start(self.instance.config)
        with self.cls._lock:
            self.cls._active = (*self.cls._active, self.instance)

    def stop(self, done: Callable[[], None]) -> None:
        instance = self.instance
        cls = self.cls

        def finish() -> None:
            with cls._lock:
                cls._active = tuple(i for i in cls._active if i is not instance)
            instance.stopped = True
            done()

        args = StopArgs(finish)
        try:
            instance.source.on_stop(args)
        finally:
            if not args.deferred:
                finish()

    def flush(self) -> None:
        self.instance.source.on_flush(FlushArgs(0))

    def clear_incremental_state(self) -> None:
        self.instance.source.will_clear_incremental_state()
        self.instance.incremental_generation += 1


class DataSource:
    """Base class of a custom data source (upstream's `perfetto::DataSource<T>`).

    Subclass it with a `name`, `register()` it, and write packets from anywhere with
    `MyDataSource.trace(lambda ctx: ctx.new_trace_packet()...)`: the callback runs once per
    running instance (session) that enabled the data source, and not at all when none did.
    Override the `on_*` hooks to follow the instance's life; they run on the backend's
    service thread. `IncrementalState` and `ThreadState` are the classes of the per-thread
    states `TraceContext` hands out.
    """

    name: ClassVar[str] = ""
    buffer_exhausted_policy: ClassVar[BufferExhaustedPolicy] = BufferExhaustedPolicy.DROP
    buffer_exhausted_policy_configurable: ClassVar[bool] = False
    """Whether a session's `DataSourceConfig.buffer_exhausted_policy` overrides the class's."""
    IncrementalState: ClassVar[type] = dict
    ThreadState: ClassVar[type] = dict

    _active: ClassVar[tuple[_Instance, ...]] = ()
    _lock: ClassVar[threading.Lock]
    _tls: ClassVar[threading.local]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._active = ()
        cls._lock = threading.Lock()
        cls._tls = threading.local()

    # Hooks -----------------------------------------------------------------------------

    def on_setup(self, config: DataSourceConfig) -> None:
        """A session configured an instance (before it starts)."""

    def on_start(self, config: DataSourceConfig) -> None:
        """The instance starts: `trace()` callbacks run for it from now on."""

    def on_stop(self, args: StopArgs) -> None:
        """The instance stops (`args.handle_stop_asynchronously()` to finish later)."""

    def on_flush(self, args: FlushArgs) -> None:
        """The session asks for everything written so far."""

    def will_clear_incremental_state(self) -> None:
        """Incremental state (interning, ...) is about to start over on every sequence."""

    # Class API -------------------------------------------------------------------------

    @classmethod
    def register(cls, descriptor: DataSourceDescriptor | None = None) -> None:
        """Registers the data source with every backend (now and initialized later)."""
        if descriptor is None:
            if not cls.name:
                raise TracingError(f"{cls.__name__} needs a `name` to be registered")
            descriptor = DataSourceDescriptor(name=cls.name)
        descriptor.will_notify_on_stop = True
        descriptor.will_notify_on_start = True
        descriptor.handles_incremental_state_clear = True
        register_kind(_Kind(cls, descriptor))

    @classmethod
    def is_enabled(cls) -> bool:
        """Whether any session runs an instance of this data source."""
        return bool(cls._active)

    @classmethod
    def trace(cls, fn: Callable[[TraceContext], object]) -> None:
        """Calls `fn(ctx)` for each running instance, on the calling thread's sequence."""
        active = cls._active
        if not active:
            return
        try:
            slots: dict[_Instance, _ThreadSlot] = cls._tls.slots
            pid: int = cls._tls.pid
        except AttributeError:
            slots = cls._tls.slots = {}
            pid = cls._tls.pid = os.getpid()
        if pid != os.getpid():
            slots = cls._tls.slots = {}
            cls._tls.pid = os.getpid()
        for instance in active:
            slot = slots.get(instance)
            if slot is None:
                if len(slots) > len(active):
                    for gone in [i for i in slots if i.stopped]:
                        slots.pop(gone).writer.close()
                policy = cls.buffer_exhausted_policy
                if cls.buffer_exhausted_policy_configurable:
                    policy = exhausted_policy(instance.config, policy)
                try:
                    writer = instance.producer.create_trace_writer(
                        instance.config.target_buffer, policy
                    )
                except Exception:
                    continue
                slot = slots[instance] = _ThreadSlot(writer)
            ctx = TraceContext(instance, slot.writer, slot)
            try:
                fn(ctx)
            finally:
                if ctx.wrote:
                    slot.writer.finish_trace_packet()
