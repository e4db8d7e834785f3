"""The engine: one recording in this process (hooks on every thread, names, GC, fork)."""

from __future__ import annotations

import contextlib
import fnmatch
import gc
import os
import signal
import sys
import threading
import types
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from protozero import _native

from perfetto_client._errors import TracingError
from perfetto_client._tracer import _packets
from perfetto_client._tracer._options import TraceOptions
from perfetto_client._tracer._sink import Sink, SinkStats

OWN = 0xFFFFFFFF  # the iid of the tracer's own code: its frames and their callees are hidden
_OWN_DIR = os.path.dirname(os.path.abspath(__file__))
# The tracing library's own packages: a program's track events are recorded as themselves.
_TRACING_MODULES = tuple(
    f"{p}."
    for p in (
        "perfetto_client",
        "perfetto_smb",
        "perfetto_service",
        "perfetto_probes",
        "perfetto_wire",
        "perfetto_protos",
        "protozero",
    )
)
TRANSPARENT: set[types.CodeType] = set()
"""The tracer's own code that runs the program: not recorded, but its callees are."""
_BATCH_BYTES = 1 << 20
_FIRST_SEQUENCE_ID = 1 << 14
_SEQUENCE_IDS = (1 << 21) - _FIRST_SEQUENCE_ID
_RING_BATCH_BYTES = 64 << 10


class Recorder(Protocol):
    """A thread's recorder (`_thread_recorder`): `_recorder.ThreadRecorder` (compiled) or
    `_hook_pure.ThreadRecorder`."""

    active: bool
    failed: bool
    in_hook: bool
    flush_soon: bool
    interrupted: BaseException | None
    events: int
    sequence_id: int

    def install(self, own_frames: int = 0, from_profile_hook: bool = False) -> None: ...
    def call(self, frame: Any) -> None: ...
    def flush(self, final: bool = False) -> None: ...
    def discard(self) -> None: ...
    def begin(self, iid: int) -> bool: ...
    def end(self) -> None: ...
    def instant(self, iid: int) -> None: ...


def hook_module(pure: bool = False) -> types.ModuleType:
    """The compiled recorder (`_recorder`) when it is built and wanted, else the pure hook."""
    if not pure and not os.environ.get("PERFETTO_PY_PURE"):
        try:  # the build is chosen here, at run time: the import fails where it is not built
            from perfetto_client._tracer import _recorder

            return _recorder
        except ImportError as e:
            _native.report_pure_module("perfetto_client._tracer._recorder", f"{e}")
    from perfetto_client._tracer import _hook_pure  # pure build only: 3.6 ms of CPU

    return _hook_pure


class _State:
    """This process's recording, and what a forked child runs (--follow-children)."""

    current: Engine | None = None
    child_restart: Callable[[], None] | None = None
    fork_cleanups: list[Callable[[], None]] = []  # noqa: RUF012 (one instance)


_state = _State()


def current() -> Engine | None:
    """The engine recording in this process, if any."""
    return _state.current


class Engine:
    """Records every thread of this process into one sink until `stop()`."""

    def __init__(self, options: TraceOptions, sink: Sink) -> None:
        self.options = options
        self.sink = sink
        self.hook = hook_module(options.pure)
        self.blobs: list[bytes] = [b""]
        self.locations = bytearray(1)
        self.pid = os.getpid()
        self._names: dict[str, int] = {}
        self._saved_excepthook = threading.excepthook
        # Thread ident -> (recorder, native id) of live threads (idents are reused), and every
        # recorder this recording made.
        self._recorders: dict[int, tuple[Recorder, int]] = {}
        self._all: list[tuple[Recorder, int, int]] = []  # recorder, ident, native id
        self._next_sequence = 1
        self._gc_open: dict[int, bool] = {}
        self._names_at_exit: dict[int, str] = {}
        self.started_ns = 0
        self.stopped_ns = 0
        self.failed = False
        self.write_error = ""
        """Why the sink stopped taking batches (the program ran on unrecorded), if it did."""
        self._lock = threading.RLock()

    # ---- names -------------------------------------------------------------------------------

    def _new_iid(self, blob_of: Callable[[int], bytes], location: bool) -> int:
        iid = len(self.blobs)
        self.blobs.append(b"")
        self.locations.append(1 if location else 0)
        self.blobs[iid] = blob_of(iid)
        return iid

    def _selected(self, module: str, file: str) -> bool:
        def matches(patterns: tuple[str, ...]) -> bool:
            return any(
                module == p
                or module.startswith(p + ".")
                or fnmatch.fnmatchcase(module, p)
                or fnmatch.fnmatchcase(file, p)
                for p in patterns
            )

        if self.options.include and not matches(self.options.include):
            return False
        return not matches(self.options.exclude)

    def intern_code(self, code: types.CodeType, frame: types.FrameType) -> int:
        """The iid naming `code` (0: not recorded)."""
        file = code.co_filename
        if file.startswith(_OWN_DIR):
            return 0 if code in TRANSPARENT else OWN
        module = frame.f_globals.get("__name__", "")
        if not isinstance(module, str):
            module = ""
        if module.startswith(_TRACING_MODULES) or not self._selected(module, file):
            return 0
        name = code.co_qualname
        if name == "<module>":
            name = f"<module {module}>"
        elif module and module not in ("__main__", "__mp_main__"):
            name = f"{module}.{name}"
        line = code.co_firstlineno
        return self._new_iid(lambda iid: _packets.interned_name(iid, name, file, line), True)

    def intern_c_function(self, func: Any) -> int:
        """The iid naming the builtin `func` (0: not recorded)."""
        owner = getattr(func, "__self__", None)
        fname = getattr(func, "__name__", type(func).__name__)
        if owner is None or isinstance(owner, types.ModuleType):
            module = getattr(func, "__module__", None) or "builtins"
            name = fname if module == "builtins" else f"{module}.{fname}"
        else:
            kind = owner if isinstance(owner, type) else type(owner)
            module = kind.__module__
            name = f"{kind.__qualname__}.{fname}"
        if module.startswith(_TRACING_MODULES) or not self._selected(module, ""):
            return 0  # the tracing library's compiled functions are not recorded either
        return self.intern_name(name)

    def intern_name(self, name: str) -> int:
        """The iid of a plain event name (GC runs, exceptions)."""
        iid = self._names.get(name)
        if iid is None:
            iid = self._new_iid(lambda iid: _packets.interned_name(iid, name), False)
            self._names[name] = iid
        return iid

    def intern_exception_start(self) -> int:
        """The iid of the instant marking where an exception started unwinding (0: none)."""
        return self.intern_name("exception") if self.options.exceptions else 0

    def intern_exception(self, kind: type[BaseException]) -> int:
        """The iid of the instant marking where an exception of type `kind` was raised."""
        return self.intern_name(f"exception {_type_name(kind)}")

    def record_uncaught(self, exc: BaseException) -> None:
        """An instant naming the exception that ended the program or a thread."""
        entry = self._recorders.get(threading.get_ident())
        if entry is None or not self.options.exceptions:
            return
        name = f"uncaught {_type_name(type(exc))}"
        message = str(exc)  # named as python's traceback ends: `KeyboardInterrupt`, `E: message`
        entry[0].instant(self.intern_name(f"{name}: {message}"[:200] if message else name))

    def _thread_excepthook(self, args: Any) -> None:
        if args.exc_value is not None:
            self.record_uncaught(args.exc_value)
        self._saved_excepthook(args)

    # ---- batches -----------------------------------------------------------------------------

    def prologue(self, recorder: Recorder, timestamp_ns: int) -> bytes:
        """The packets opening every batch of `recorder`."""
        tid, name = self._thread_of(recorder)
        return _packets.batch_prologue(self.pid, tid, name, recorder.sequence_id, timestamp_ns)

    def _thread_of(self, recorder: Recorder) -> tuple[int, str]:
        for r, ident, tid in self._all:
            if r is recorder:
                entry = self._recorders.get(ident)
                thread = threading._active.get(ident)  # type: ignore[attr-defined]
                if entry is None or entry[0] is not recorder or thread is None:
                    return tid, self._names_at_exit.get(tid, f"thread {tid}")
                return tid, thread.name
        # Called from the recorder's constructor, on its own thread.
        return threading.get_native_id(), threading.current_thread().name

    def write_batch(self, recorder: Recorder, data: bytes) -> None:
        """Takes a full batch from a thread's recorder.

        A write error stops the recording (see `write_error`). What a signal handler raised
        meanwhile is, inside the hook, left in `recorder.interrupted` for the hook to raise
        where the program can take it.
        """
        events, recorder.events = recorder.events, 0
        try:
            self.sink.write(data, events)
        except OSError as exc:
            self.stop_writing(exc)
        except BaseException as exc:
            if not recorder.in_hook:
                raise
            recorder.interrupted = exc

    def stop_writing(self, exc: OSError) -> None:
        """The sink failed with `exc`: says so once and stops every thread's recording."""
        if self.write_error:
            return
        self.write_error = f"writing {self.sink.stats.path}: {exc.strerror or exc}"
        print(f"perfetto-trace: recording stopped: {self.write_error}", file=sys.stderr)
        for recorder, _, _ in list(self._all):
            recorder.active = False

    # ---- threads -----------------------------------------------------------------------------

    def new_sequence_id(self) -> int:
        """A trusted packet sequence id of this recording's own (0 with --system)."""
        if self.options.system:
            return 0  # traced numbers the sequences of its TraceWriters itself
        with self._lock:
            index = self._next_sequence
            self._next_sequence += 1
        # Three-byte varints above the ids a tracing service hands out (the client's sessions
        # write into the same trace). Ids may repeat across processes and threads: every
        # batch resets the sequence's state, so batches of one id never depend on another's.
        return _FIRST_SEQUENCE_ID + ((self.pid << 6) + index) % _SEQUENCE_IDS

    def thread_name(self, tid: int) -> str | None:
        """The `threading` name of this process's thread `tid` (None: not a Python thread
        of this recording's)."""
        for thread in threading.enumerate():
            if thread.native_id == tid:
                return thread.name
        return self._names_at_exit.get(tid)

    def _new_recorder(self) -> Recorder:
        sequence_id = self.new_sequence_id()
        batch = _RING_BATCH_BYTES if self.sink.ring else _BATCH_BYTES
        recorder: Recorder = self.hook.ThreadRecorder(
            self,
            sequence_id=sequence_id,
            seq=_packets.sequence_field(sequence_id),
            batch_size=batch,
            max_depth=self.options.max_depth,
            min_duration_ns=self.options.min_duration_ns,
            c_calls=self.options.c_calls,
        )
        ident, tid = threading.get_ident(), threading.get_native_id()
        finished = self._recorders.get(ident)
        if finished is not None:
            # The ident is reused: the thread that had it has ended, and so has its recording.
            self._all = [entry for entry in self._all if entry[0] is not finished[0]]
            finished[0].flush(final=True)
        self._recorders[ident] = (recorder, tid)
        self._all.append((recorder, ident, tid))
        self._names_at_exit[tid] = threading.current_thread().name
        return recorder

    def _thread_bootstrap(self, frame: Any, event: str, arg: Any) -> None:
        # threading.setprofile's hook runs first on every new thread: swap in our own.
        if _state.current is self:
            recorder = self._new_recorder()
            recorder.install(from_profile_hook=True)
            if event == "call":
                recorder.call(frame)
        else:
            sys.setprofile(None)

    def _gc_callback(self, phase: str, info: dict[str, int]) -> None:
        entry = self._recorders.get(threading.get_ident())
        if entry is None:
            return
        recorder = entry[0]
        ident = threading.get_ident()
        if phase == "start":
            name = f"gc (generation {info.get('generation', 0)})"
            self._gc_open[ident] = recorder.begin(self.intern_name(name))
        elif self._gc_open.pop(ident, False):
            recorder.end()

    # ---- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Starts recording every thread that calls a function from now on."""
        if _state.current is not None:
            raise TracingError("a recording is already running in this process")
        _state.current = self
        self.hook.new_generation()
        self.started_ns = self.hook.now_ns()
        threading.setprofile(self._thread_bootstrap)
        self._saved_excepthook = threading.excepthook
        threading.excepthook = self._thread_excepthook
        if self.options.gc:
            gc.callbacks.append(self._gc_callback)
        self._new_recorder().install(_own_frames_running())

    def stop(self) -> SinkStats:
        """Stops recording, ends open slices, writes what is buffered and closes the sink."""
        sys.setprofile(None)
        threading.setprofile(None)
        self.hook.uninstall_all_threads()
        threading.excepthook = self._saved_excepthook
        if self._gc_callback in gc.callbacks:
            gc.callbacks.remove(self._gc_callback)
        self.stopped_ns = self.hook.now_ns()
        for recorder, _, _ in list(self._all):
            self.failed |= recorder.failed
            recorder.flush(final=True)
        _state.current = None
        try:
            stats = self.sink.close()
        except OSError as exc:
            self.stop_writing(exc)
            stats = self.sink.stats
        if self.write_error:
            stats.lost_reason = f"recording stopped: {self.write_error}; the trace is incomplete"
        elif self.failed:
            stats.lost_reason = stats.lost_reason or "an internal error stopped a thread's recorder"
        return stats

    @contextlib.contextmanager
    def threads_not_recorded(self) -> Iterator[None]:
        """Threads started inside the block are not recorded (the tracer's own helpers)."""
        threading.setprofile(None)
        try:
            yield
        finally:
            if _state.current is self:
                threading.setprofile(self._thread_bootstrap)

    def stop_current_thread(self) -> None:
        """Stops recording the calling thread (the others go on until `stop()`)."""
        entry = self._recorders.get(threading.get_ident())
        if entry is not None:
            entry[0].active = False

    def snapshot(self, path: str) -> int:
        """Writes what the ring holds now to `path` (the recording goes on).

        The calling thread's buffered events are included unless a signal handler interrupted
        its recorder (an event being recorded, a batch being handed over); other threads, and
        that one, hand theirs over at their next event, in time for the next snapshot.
        """
        me = threading.get_ident()
        for ident, (recorder, _) in list(self._recorders.items()):
            if ident == me and not recorder.in_hook:
                recorder.flush()
            else:
                recorder.flush_soon = True
        return self.sink.dump(path)

    def forget_after_fork(self) -> None:
        """In a forked child: drops the parent's buffers and stops recording."""
        for recorder, _, _ in self._all:
            recorder.discard()
        self._recorders.clear()
        self._all.clear()
        sys.setprofile(None)
        threading.setprofile(None)
        self.hook.uninstall_all_threads()
        if self._gc_callback in gc.callbacks:
            gc.callbacks.remove(self._gc_callback)
        _state.current = None


def _type_name(kind: type) -> str:
    name = kind.__qualname__
    return name if kind.__module__ in ("builtins", "__main__") else f"{kind.__module__}.{name}"


def _own_frames_running() -> int:
    """The tracer's frames on the calling stack that return before the program goes on."""
    count = 0
    frame = sys._getframe(2)  # the caller of Engine.start
    while frame is not None:
        code = frame.f_code
        if not code.co_filename.startswith(_OWN_DIR) or code in TRANSPARENT:
            break
        count += 1
        frame = frame.f_back  # type: ignore[assignment]
    return count + 1  # Engine.start itself


def in_tracer_code(frame: types.FrameType | None) -> bool:
    """True when `frame`, or a caller of it below the program's own frames, is the tracer's."""
    while frame is not None:
        code = frame.f_code
        if code in TRANSPARENT:
            return False
        if code.co_filename.startswith(_OWN_DIR):
            return True
        frame = frame.f_back
    return False


_fork_mask = threading.local()


def _before_fork() -> None:
    # SIGTERM waits while the child replaces the parent's handlers and starts its recording:
    # delivered in between, the parent's handler would swallow it.
    if _state.current is not None:
        _fork_mask.saved = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})


def _restore_mask_after_fork() -> None:
    saved = getattr(_fork_mask, "saved", None)
    if saved is not None:
        _fork_mask.saved = None
        signal.pthread_sigmask(signal.SIG_SETMASK, saved)


def _after_fork_in_child() -> None:
    try:
        for cleanup in _state.fork_cleanups:
            cleanup()
        engine = _state.current
        if engine is not None:
            engine.forget_after_fork()
        if _state.child_restart is not None:
            _state.child_restart()
    finally:
        _restore_mask_after_fork()


def on_fork_in_child(cleanup: Callable[[], None]) -> None:
    """Runs `cleanup` in every forked child before its recording (if any) restarts."""
    _state.fork_cleanups.append(cleanup)


def set_child_restart(callback: Callable[[], None] | None) -> None:
    """What a forked child runs after dropping the parent's recording (--follow-children)."""
    _state.child_restart = callback


os.register_at_fork(
    before=_before_fork,
    after_in_parent=_restore_mask_after_fork,
    after_in_child=_after_fork_in_child,
)
