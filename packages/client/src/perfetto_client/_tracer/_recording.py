"""One recording: options -> sink -> engine, started and stopped, with its summary."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import types
from typing import TYPE_CHECKING, Any

from perfetto_client._errors import TracingError
from perfetto_client._tracer import _packets
from perfetto_client._tracer._engine import Engine, current, hook_module
from perfetto_client._tracer._options import DEFAULT_OUTPUT, TraceOptions
from perfetto_client._tracer._sink import FileSink, Sink, SinkStats
from perfetto_client._tracer._sink_track_events import SinkTrackEvents
from perfetto_client._tracer._summary import Summary
from perfetto_client._tracer._triggers import SnapshotTriggers
from perfetto_client._tracks import given_process_name

if TYPE_CHECKING:
    from perfetto_client._tracer._bridges import Bridges
    from perfetto_client._tracer._children import Children
    from perfetto_client._tracer._sched import SchedRecorder


def process_name(argv: list[str]) -> str:
    """The name a process track gets: the program's file or module name (or the name given
    with `_tracks.set_process_name`)."""
    if given_process_name():
        return given_process_name()
    if "--multiprocessing-fork" in argv:
        return "multiprocessing child"
    return os.path.basename(argv[0]) if argv and argv[0] else "python"


class Recording:
    """Records this process (and, if asked, its Python children) into `options.output`."""

    def __init__(self, options: TraceOptions) -> None:
        self.options = options
        self.engine: Engine | None = None
        self.summary: Summary | None = None
        self._children: Children | None = None
        self._client: SinkTrackEvents | None = None
        self._triggers: SnapshotTriggers | None = None
        self._bridges: Bridges | None = None
        self._sched: SchedRecorder | None = None
        self._sched_summary = ""
        self._snapshots = 0
        self._snapshot_lock = threading.Lock()  # one snapshot at a time
        self._snapshotting: set[int] = set()  # threads writing one, or waiting to
        self._asked: list[str] = []  # causes left to whichever thread writes snapshots
        self._owner = 0

    @property
    def active(self) -> bool:
        """True between `start()` and `stop()`, in the process that started it (in a forked
        child the recording is its parent's)."""
        return self.engine is not None and os.getpid() == self._owner

    def start(self) -> None:
        """Starts recording every thread of this process."""
        if self.engine is not None:
            raise TracingError("this recording has already started")
        if current() is not None:
            raise TracingError("a recording is already running in this process")
        bridges = None
        if self.options.otel or self.options.log_level is not None:
            if self.options.system or not self.options.client_events:
                raise TracingError(
                    "--otel and --logging record into the trace file "
                    "(not with --system, nor without the program's track events)"
                )
            from perfetto_client._tracer._bridges import Bridges  # logging, maybe the SDK: 9+ ms

            bridges = Bridges(self.options.otel, self.options.log_level)
        self._owner = os.getpid()
        header = _packets.process_descriptor(self._owner, process_name(sys.argv), list(sys.argv), 0)
        ring = int(self.options.ring_mb * (1 << 20))
        sink: Sink
        if self.options.sched and (self.options.system or ring):
            raise TracingError("--sched records into a trace file: not with --system or --ring")
        if self.options.system:
            if ring or self.options.follow_children:
                raise TracingError("--system does not go with --ring or --follow-children")
            # The service's IPC client and shared memory (265 ms of CPU) load only for --system.
            from perfetto_client._tracer._system_sink import SystemSink

            sink = SystemSink(header, hook_module(self.options.pure).split_packets)
            if not sink.connected:
                print(
                    f"perfetto-trace: no tracing service at {sink.socket}: "
                    "the program runs, nothing is recorded",
                    file=sys.stderr,
                )
        else:
            try:
                max_bytes = int(self.options.max_size_mb * (1 << 20))
                sink = FileSink(self.options.output, header, ring, max_bytes)
            except OSError as exc:
                raise TracingError(
                    f"can't write {self.options.output!r}: {exc.strerror or exc}"
                ) from None
        if self.options.follow_children:
            # Imported here: it loads json, which a recording without children does not need (7 ms).
            from perfetto_client._tracer._children import Children

            self._children = Children(self.options, Recording)
            self._children.enable()
        if self.options.client_events and not self.options.system:
            # The program's own track events (and its spans and log records) go straight into
            # the sink, whether or not it initializes tracing itself. Set up before the engine
            # starts: nothing of it is recorded as the program's calls.
            self._client = SinkTrackEvents(sink)
            self._client.start()
            if bridges is not None:
                bridges.install()
                self._bridges = bridges
        self.engine = Engine(self.options, sink)
        if self.options.sched:
            self._start_sched(self.engine)  # before the engine: its thread is not recorded
        self.engine.start()
        if self.options.snapshot_triggers and ring:
            self._triggers = SnapshotTriggers(self.options.snapshot_triggers, self._on_trigger)
            self._triggers.enable()

    def _start_sched(self, engine: Engine) -> None:
        """Starts `--sched`; where tracefs cannot be used, says so in one line and goes on."""
        from perfetto_probes import ProbesError  # only for --sched: ftrace and /proc readers

        from perfetto_client._tracer._sched import SchedRecorder

        sched = SchedRecorder(
            engine.sink, engine.new_sequence_id(), engine.thread_name, engine.stop_writing
        )
        try:
            sched.start()
        except ProbesError as exc:
            print(
                f"perfetto-trace: --sched: {exc}; the program runs, its scheduling is not recorded",
                file=sys.stderr,
            )
            self._sched_summary = f"scheduling was not recorded: {exc}"
            return
        self._sched = sched

    def stop(self) -> Summary:
        """Stops recording and finishes the trace file.

        Only in the process that started it: a forked child gets `TracingError` and the
        parent's engine, file and children's parts are left alone.
        """
        engine = self.engine
        if engine is None:
            raise TracingError("this recording is not running")
        self._check_owner("stop")
        self.engine = None
        if threading.get_ident() not in self._snapshotting:
            with self._snapshot_lock:  # a snapshot another thread is writing ends first
                pass
        sched, self._sched = self._sched, None
        if sched is not None:
            try:
                sched.stop()  # its last events reach the sink before the engine closes it
            finally:
                self._sched_summary = sched.summary()
        if self._triggers is not None:
            self._triggers.disable()
            self._triggers = None
        if self._bridges is not None:
            self._bridges.uninstall()
            self._bridges = None
        client, self._client = self._client, None
        if client is not None:
            client.stop()  # its last batches reach the sink before the engine closes it
            if client.write_error is not None and not engine.write_error:
                error = client.write_error
                engine.write_error = f"writing {engine.sink.stats.path}: {error.strerror or error}"
        stats: SinkStats = engine.stop()
        if client is not None and client.late_events:
            stats.events_lost += client.late_events
            stats.lost_reason = stats.lost_reason or "written after the recording stopped"
        processes = 1
        if self._children is not None:
            extra = self._children.collect(stats)
            processes += extra
        self.summary = Summary(
            stats.path if self.options.system else os.path.abspath(stats.path),
            stats.bytes_written if self.options.system else os.path.getsize(stats.path),
            stats.events_written,
            stats.events_lost,
            stats.lost_reason,
            max(0, engine.stopped_ns - engine.started_ns),
            processes,
            self.options.system,
            "compiled" if engine.hook.COMPILED else "pure",
            incomplete=bool(engine.write_error),
            cut=stats.cut(),
            sched=self._sched_summary,
        )
        return self.summary

    def record_uncaught(self, exc: BaseException) -> None:
        """Marks the exception that ends the program with an instant naming its type."""
        if self.active and self.engine is not None:
            self.engine.record_uncaught(exc)

    def wait_for_threads(self) -> None:
        """Waits for the program's non-daemon threads (still recorded) as the interpreter would."""
        if self.engine is not None:
            self.engine.stop_current_thread()
        current = threading.current_thread()
        for thread in threading.enumerate():
            if (
                thread is not current
                and not thread.daemon
                and thread is not threading.main_thread()
            ):
                thread.join()

    def write_snapshot(self, cause: str = "", wait: bool = True) -> None:
        """Writes what the flight recorder holds now to the next `NAME.snapshot-N.pftrace` and
        says so on stderr, the line starting with `cause` (`"trigger 'dump': "`); the recording
        goes on. A snapshot that cannot be written is one line too, and the recording goes on.

        One snapshot is written at a time, numbered in the order written. Without `wait` (a
        signal handler, which must not block the thread it interrupted), or when a signal
        handler asks inside this thread's own snapshot, the thread writing one writes this one
        right after it; asked for again meanwhile with the same cause, it is one snapshot (as
        a signal sent twice before it is taken is taken once). Once the recording has stopped,
        nothing is written: the trace file holds it all. Only in the process that started the
        recording: a forked child gets `TracingError` (its copy of the ring is not the trace).
        """
        me = threading.get_ident()
        pending = [cause]
        if not wait or me in self._snapshotting:
            if cause not in self._asked:
                self._asked.append(cause)
            if me in self._snapshotting:
                return
            pending = []
        if self.engine is None:
            raise TracingError("this recording is not running")
        self._check_owner("snapshot")
        while True:
            self._snapshotting.add(me)  # before the lock: a signal handler from here is inside
            try:
                if not self._snapshot_lock.acquire(blocking=wait):
                    return  # the thread holding it takes `_asked` before it lets go
                try:
                    pending += self._take_asked()
                    while pending:
                        self._write_one_snapshot(pending.pop(0))
                        pending += self._take_asked()
                finally:
                    self._snapshot_lock.release()
            finally:
                self._snapshotting.discard(me)
            if not self._asked:  # else asked for between the last look and the release
                return

    def _take_asked(self) -> list[str]:
        # Under the lock: only its holder takes; a signal handler may append meanwhile.
        taken: list[str] = []
        while self._asked:
            taken.append(self._asked.pop(0))
        return taken

    def _write_one_snapshot(self, cause: str) -> None:
        engine = self.engine
        if engine is None:  # stopped by another thread meanwhile
            return
        self._snapshots += 1
        root, ext = os.path.splitext(self.options.output)
        path = f"{root}.snapshot-{self._snapshots}{ext or '.pftrace'}"
        try:
            size = engine.snapshot(path)
        except OSError as exc:
            print(
                f"perfetto-trace: {cause}cannot write snapshot {path}: {exc.strerror or exc}",
                file=sys.stderr,
            )
            return
        print(f"perfetto-trace: {cause}snapshot written to {path} ({size} bytes)", file=sys.stderr)

    def _check_owner(self, action: str) -> None:
        if not self.active:
            raise TracingError(
                f"this recording belongs to process {self._owner}, which started it: "
                f"a forked child cannot {action} it"
            )

    def _on_trigger(self, name: str) -> None:
        if not self.active:  # a forked child's trigger: the snapshots are its parent's
            return
        self.write_snapshot(f"trigger {name!r}: ")


class record(contextlib.ContextDecorator):  # noqa: N801 (used like a function)
    """Records this process into a trace file while the block (or decorated call) runs.

    `with perfetto_client.record("out.pftrace"):` or `@perfetto_client.record("out.pftrace")`;
    the keyword arguments are `TraceOptions` fields (`include`, `exclude`, `max_depth`,
    `min_duration_ns`, `c_calls`, `gc`, `exceptions`, `exception_types`, `ring_mb`,
    `snapshot_triggers`, `follow_children`, `otel`, `log_level`, `max_size_mb`, `sched`).
    After the block, `.summary` says what was written (in the process that entered the block;
    a child forked inside it leaves the recording alone and its `.summary` stays None).
    """

    def __init__(self, output: str | os.PathLike[str] = DEFAULT_OUTPUT, **options: Any) -> None:
        try:
            self.options = TraceOptions(output=os.fspath(output), **options)
        except TypeError as exc:
            raise TracingError(str(exc)) from None
        self.summary: Summary | None = None
        self._recording: Recording | None = None

    def __enter__(self) -> record:
        self._recording = Recording(self.options)
        self._recording.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: types.TracebackType | None,
    ) -> None:
        recording, self._recording = self._recording, None
        # In a child forked inside the block the recording is its parent's: left alone.
        if recording is not None and recording.active:
            self.summary = recording.stop()
