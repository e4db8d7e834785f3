"""The pure build's profile hook: `sys.setprofile` feeding the one recorder its events.

Used when the extension is not built, with `PERFETTO_PY_PURE=1` or with `--pure`; the
recorder is `_thread_recorder` run as Python (its source, even where it is compiled). Python's
profile function cannot see which returns are caused by exceptions (it reports them as returns
of None), so no exception instants are recorded.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import types
from typing import TYPE_CHECKING, Any

from protozero import read_varint

from perfetto_client._tracer._packet_batch_pure import now_ns

if TYPE_CHECKING:
    from perfetto_client._tracer import _thread_recorder
else:

    def _as_python(module: str) -> types.ModuleType:
        # `module` run from its source, whether or not it is compiled.
        name = f"{module}.__python__"
        if name not in sys.modules:
            source = os.path.join(os.path.dirname(__file__), module.rpartition(".")[2] + ".py")
            spec = importlib.util.spec_from_file_location(name, source)
            assert spec is not None
            assert spec.loader is not None
            sys.modules[name] = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(sys.modules[name])
        return sys.modules[name]

    _thread_recorder = _as_python("perfetto_client._tracer._thread_recorder")

__all__ = [
    "COMPILED",
    "ProfileRecorder",
    "ThreadRecorder",
    "new_generation",
    "now_ns",
    "split_packets",
    "uninstall_all_threads",
]

COMPILED = False

# By id(): hashing a code object hashes its contents. The codes are kept alive in
# _interned_codes so that their ids are not reused.
_codes: dict[int, int] = {}
_interned_codes: list[types.CodeType] = []
_c_functions: dict[Any, int] = {}


def new_generation() -> None:
    """Forgets every cached per-code and per-C-function decision (a new recording starts)."""
    _codes.clear()
    _interned_codes.clear()
    _c_functions.clear()


def uninstall_all_threads() -> None:
    """Stops the hook of this thread; other threads' recorders are deactivated by the engine."""
    sys.setprofile(None)


def split_packets(batch: bytes) -> list[bytes]:
    """The packets of a batch (framed as a Trace), each without its `Trace.packet` framing."""
    view = memoryview(batch)
    packets = []
    pos, end = 0, len(batch)
    while pos < end:
        if batch[pos + 1] < 0x80:
            size, pos = batch[pos + 1], pos + 2
        else:
            size, pos = read_varint(view, pos + 1, end)
        packets.append(batch[pos : pos + size])
        pos += size
    return packets


def _c_key(func: Any) -> Any:
    # A builtin's key: itself, or its name and the type of what it is bound to.
    owner = getattr(func, "__self__", None)
    if owner is None or type(owner) is types.ModuleType:
        return func
    return (type(owner), func.__name__)


class ProfileRecorder(_thread_recorder.ThreadRecorder):
    """Records one thread's calls, fed by `sys.setprofile`."""

    def install(self, own_frames: int = 0, from_profile_hook: bool = False) -> None:
        """Makes this recorder the profile hook of the calling thread.

        `own_frames` of the tracer's frames are running and will return before the program's
        next event; nothing is recorded until they have.
        """
        # Unless called from a profile hook (which is not traced), this method's own return
        # is the first event the new hook sees.
        self.own_depth = own_frames + (0 if from_profile_hook else 1)
        sys.setprofile(self._profile)

    def _code_iid(self, where: Any) -> int:
        code = where.f_code
        iid = _codes.get(id(code))
        if iid is None:
            iid = _codes[id(code)] = self.engine.intern_code(code, where)
            _interned_codes.append(code)
        return iid

    def _c_function_iid(self, func: Any, arg0: Any) -> int:
        del arg0  # a profile function is given builtins bound
        key = _c_key(func)
        iid = _c_functions.get(key)
        if iid is None:
            iid = _c_functions[key] = self.engine.intern_c_function(func)
        return iid

    def _profile(self, frame: types.FrameType, event: str, arg: Any) -> None:
        if not self.active:
            return
        self.in_hook = True
        try:
            # The common call and return go to the recorder's fast path, the rest (and what
            # the fast path leaves) to the general one.
            if event == "call":
                if not self._begin_fast(_codes.get(id(frame.f_code), 0), 0):
                    self._enter(self._code_iid(frame))
            elif event == "return":
                if self._end_fast(0):
                    self.unwinding = False
                else:
                    self._leave(frame, False)
            elif not self.c_calls:
                pass
            elif event == "c_call":
                if not (
                    self.depth
                    and self.entry_iid[self.depth - 1] != 0
                    and self._begin_fast(_c_functions.get(_c_key(arg), 0), 0)
                ):
                    self._c_enter(frame, arg, None)
            elif not self._end_fast(0):
                self._c_leave()
        except Exception:
            self.active = False
            self.failed = True
        except BaseException:
            # A signal handler that ran inside the hook raised (KeyboardInterrupt, SIGTERM,
            # --duration): the program gets it as it would untraced. Python then removes
            # this thread's hook, so nothing more is recorded on it.
            self.active = False
            self.in_hook = False
            raise
        self.in_hook = False
        if self.interrupted is not None:
            # What a signal handler raised during a batch write, now that the event is
            # recorded. Python then removes this thread's hook: nothing more is recorded on it.
            exc, self.interrupted = self.interrupted, None
            self.active = False
            raise exc.with_traceback(None)


ThreadRecorder = ProfileRecorder  # the interface's name (`_engine.Recorder`)
