"""--follow-children: Python children (fork, spawn, forkserver, subprocess) record too.

Each child records into its own part file in a directory next to the output; the parent
appends the parts to its trace when it stops. Forked children restart recording in the
at-fork hook; other Python children find the settings in their environment and start from
`_site/sitecustomize.py`. A child flushes on normal exit, on `os._exit` (multiprocessing's
children leave that way) and on SIGTERM (how a Pool stops its workers).
"""

from __future__ import annotations

import _thread
import atexit
import contextlib
import json
import os
import signal
import sys
import time
import types
from collections.abc import Callable
from typing import Any, Protocol

from perfetto_client._tracer import _engine
from perfetto_client._tracer._options import TraceOptions
from perfetto_client._tracer._sink import SinkStats

ENV = "PERFETTO_TRACE_CHILDREN"


class _ChildRecording(Protocol):
    """What a child's recording is to this module (a `_recording.Recording`)."""

    engine: Any

    def start(self) -> None: ...

    def stop(self) -> Any: ...


RecordingType = Callable[[TraceOptions], _ChildRecording]
"""Makes a child's recording (`Recording`: given, as `_recording` imports this module)."""

_recording_type: list[RecordingType] = []
"""The `RecordingType` of this process's children (set by `enable` or
`start_from_environment`)."""
_SIGTERM_RETRY_S = 0.01
_SITE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_site")


class Children:
    """The parent's side: sets up the children's environment and collects their parts."""

    def __init__(self, options: TraceOptions, recording: RecordingType) -> None:
        self.options = options
        self.recording = recording
        import tempfile  # the parent's side only, as shutil below: 6 ms of CPU

        out_dir = os.path.dirname(os.path.abspath(options.output))
        self.parts = tempfile.mkdtemp(prefix=".perfetto-trace-children-", dir=out_dir)
        self._saved: dict[str, str | None] = {}

    def enable(self) -> None:
        """Children started from now on record into this recording's parts directory."""
        settings = self.options._asdict()
        settings["follow_children"] = False
        settings["client_events"] = False
        settings["snapshot_triggers"] = ()
        config = json.dumps({"parts": self.parts, "options": settings})
        pythonpath = os.environ.get("PYTHONPATH")
        for name in (ENV, "PYTHONPATH"):
            self._saved[name] = os.environ.get(name)
        os.environ[ENV] = config
        os.environ["PYTHONPATH"] = _SITE_DIR + (os.pathsep + pythonpath if pythonpath else "")
        _recording_type[:] = [self.recording]
        _engine.set_child_restart(_restart_in_forked_child)
        _note_process_starts(self.parts)

    def collect(self, stats: SinkStats) -> int:
        """Appends every child's part to the parent's trace; returns how many were added."""
        _engine.set_child_restart(None)
        for name, value in self._saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        # The parent's side only (a child loads this module too): 3 ms of CPU.
        import shutil

        count = 0
        names = sorted(os.listdir(self.parts))
        started = {n[: -len(".started")] for n in names if n.endswith(".started")}
        parts = [n[: -len(".pftrace")] for n in names if n.endswith(".pftrace")]
        written = [p for p in parts if os.path.getsize(os.path.join(self.parts, p + ".pftrace"))]
        silent = (started | set(parts)) - set(written)
        if silent:
            # Started, but ended (a Pool terminates workers still starting up) before its
            # recording wrote anything.
            stats.lost_reason = (
                f"{len(silent)} child process{'es' if len(silent) > 1 else ''} "
                "ended before recording started in it"
            )
        with open(stats.path, "ab") as out:
            stats.bytes_written = out.tell()
            for part in written:
                path = os.path.join(self.parts, part + ".pftrace")
                info = _read_json(os.path.join(self.parts, part + ".json"))
                stats.events_lost += int(info.get("lost", 0))
                if not stats.admit(os.path.getsize(path), int(info.get("events", 0))):
                    continue  # past the size cap: counted there
                with open(path, "rb") as data:
                    shutil.copyfileobj(data, out)
                stats.bytes_written = out.tell()
                count += 1
                stats.events_written += int(info.get("events", 0))
                if info.get("reason") and not stats.lost_reason:
                    stats.lost_reason = str(info["reason"])
                if not info:
                    stats.lost_reason = stats.lost_reason or "a child did not finish its trace"
        shutil.rmtree(self.parts, ignore_errors=True)
        return count


_watched_parts: list[str] = []


def _note_process_starts(parts: str) -> None:
    """Leaves `PID.started` in `parts` for every multiprocessing child this process starts."""
    # multiprocessing: 8 ms of CPU, which a program that does not use it does not pay.
    from multiprocessing import process

    if _watched_parts:
        _watched_parts[0] = parts
        return
    _watched_parts.append(parts)
    original = process.BaseProcess.start

    def start(self: process.BaseProcess) -> None:
        original(self)
        if self.pid is not None:
            with contextlib.suppress(OSError):
                open(os.path.join(_watched_parts[0], f"{self.pid}.started"), "w").close()

    start.__doc__ = original.__doc__
    _engine.TRANSPARENT.add(start.__code__)  # what start() calls is recorded as before
    process.BaseProcess.start = start  # type: ignore[method-assign]


def _read_json(path: str) -> dict[str, Any]:
    try:
        with open(path) as f:
            value = json.load(f)
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _start_child(parts: str, options: TraceOptions) -> None:
    # SIGTERM waits until the part is open and the handler that completes it is in place.
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        _start_child_recording(parts, options)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def _start_child_recording(parts: str, options: TraceOptions) -> None:
    pid = os.getpid()
    # The parent's --sched already records every CPU (and so the children's threads).
    options = options._replace(output=os.path.join(parts, f"{pid}.pftrace"), sched=False)
    recording = _recording_type[0](options)
    recording.start()
    _note_process_starts(parts)
    real_exit = os._exit
    # A Pool may SIGTERM a worker that is already finishing (it got the stop sentinel and is
    # exiting): the signal then waits for the part to be complete.
    state = {"finishing": False, "done": False, "terminate": False}

    def finish() -> None:
        if state["finishing"]:
            return
        state["finishing"] = True
        try:
            summary = recording.stop()
            info: dict[str, object] = {
                "events": summary.events_written,
                "lost": summary.events_lost,
            }
            reason = "; ".join(filter(None, (summary.lost_reason, summary.cut)))
            if reason:
                info["reason"] = reason
            with open(os.path.join(parts, f"{pid}.json"), "w") as f:
                json.dump(info, f)
        except OSError:
            pass  # the parent has finished its trace already
        state["done"] = True
        if state["terminate"]:
            _die_by_sigterm()

    def exit_after_finishing(code: int) -> None:
        if os.getpid() == pid:
            finish()
        real_exit(code)

    watchdog = _SigtermWatchdog(state)

    def on_sigterm(signum: int, frame: types.FrameType | None) -> None:
        if state["finishing"] and not state["done"]:
            state["terminate"] = True
            return
        if recording.engine is not None and _engine.in_tracer_code(frame):
            # The signal interrupted the recorder itself (a batch half written, the sink's
            # lock held): finishing here would deadlock or tear the part. The watchdog
            # delivers it again shortly.
            watchdog.poke()
            return
        finish()
        _die_by_sigterm()

    atexit.register(finish)
    os._exit = exit_after_finishing  # type: ignore[assignment]
    try:
        if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
            signal.signal(signal.SIGTERM, on_sigterm)
            watchdog.start(on_sigterm)
    except ValueError:
        pass  # not the main thread


class _SigtermWatchdog:
    """Delivers SIGTERM to the main thread again until the child is finishing its part.

    Python runs a signal handler only when the main thread gets back to the interpreter. A
    SIGTERM that lands while that thread is in C code that then blocks without checking for
    signals is never handled: a Pool worker waiting for the task queue's lock can take the
    signal inside sem_wait, between losing a wake-up race and its next futex wait, and then
    waits forever. The interpreter's C handler writes the signal number to the wakeup fd,
    this thread's pipe; the handler writes it there too when it must put the signal off.
    The thread starts while SIGTERM is blocked (see _start_child), so it never takes a
    SIGTERM itself: every one goes to the main thread.
    """

    def __init__(self, state: dict[str, bool]) -> None:
        self.state = state
        self.handler: Any = None
        self.pid = os.getpid()
        self.main = _thread.get_ident()
        self.read_fd, self.write_fd = os.pipe()
        os.set_blocking(self.write_fd, False)

    def start(self, handler: Any) -> None:
        """Starts the thread and makes the pipe the wakeup fd (now, or when it is free)."""
        self.handler = handler
        _watchdogs.append(self)
        _thread.start_new_thread(self._run, ())
        if not self._take_wakeup_fd():
            # A forkserver's child gives up the server's wakeup fd before it runs its
            # process; multiprocessing runs its after-fork callbacks then.
            # multiprocessing.util: 12 ms of CPU, for a forkserver's child only.
            from multiprocessing import util

            util.register_after_fork(self, _SigtermWatchdog._take_wakeup_fd)

    def poke(self) -> None:
        """Asks for SIGTERM to be delivered again shortly."""
        with contextlib.suppress(OSError):
            os.write(self.write_fd, bytes([signal.SIGTERM]))

    def _take_wakeup_fd(self) -> bool:
        if os.getpid() != self.pid:
            return False
        previous = signal.set_wakeup_fd(self.write_fd, warn_on_full_buffer=False)
        if previous in (-1, self.write_fd):
            return True
        signal.set_wakeup_fd(previous)  # the program's own: it keeps it
        return False

    def _run(self) -> None:
        while True:
            try:
                signals = os.read(self.read_fd, 512)
            except OSError:
                return
            if not signals:
                return
            if signal.SIGTERM not in signals:
                continue
            time.sleep(_SIGTERM_RETRY_S)
            if not self.state["finishing"] and signal.getsignal(signal.SIGTERM) is self.handler:
                signal.pthread_kill(self.main, signal.SIGTERM)

    def close(self) -> None:
        """In a forked child: lets go of the wakeup fd and the parent's pipe."""
        with contextlib.suppress(ValueError):
            previous = signal.set_wakeup_fd(-1)
            if previous not in (-1, self.write_fd):
                signal.set_wakeup_fd(previous)  # the program's own: put it back
        for fd in (self.read_fd, self.write_fd):
            with contextlib.suppress(OSError):
                os.close(fd)


_watchdogs: list[_SigtermWatchdog] = []


def _forget_watchdogs() -> None:
    # A forked child has no watchdog thread; its signals must not reach the parent's pipe.
    for watchdog in _watchdogs:
        watchdog.close()
    _watchdogs.clear()


_engine.on_fork_in_child(_forget_watchdogs)


def _die_by_sigterm() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


def _restart_in_forked_child() -> None:
    config = _config()
    if config is not None:
        _start_child(config[0], config[1])


def _config() -> tuple[str, TraceOptions] | None:
    raw = os.environ.get(ENV)
    if not raw:
        return None
    try:
        config = json.loads(raw)
        fields: dict[str, Any] = {
            k: tuple(v) if isinstance(v, list) else v for k, v in config["options"].items()
        }
        options = TraceOptions(**fields)
        return str(config["parts"]), options
    except (ValueError, KeyError, TypeError):
        print("perfetto-trace: ignoring a malformed " + ENV, file=sys.stderr)
        return None


# multiprocessing's helper processes outlive the program; the forkserver's children
# (the workers) are recorded from the at-fork hook.
_HELPERS = ("multiprocessing.resource_tracker", "multiprocessing.forkserver")


def start_from_environment(recording: RecordingType) -> None:
    """Starts a `recording` if this process is a child of a --follow-children recording."""
    config = _config()
    if config is None or _engine.current() is not None:
        return
    _recording_type[:] = [recording]
    _engine.set_child_restart(_restart_in_forked_child)
    if not any(helper in arg for arg in sys.orig_argv for helper in _HELPERS):
        _start_child(*config)
