# cython: language_level=3, binding=False, boundscheck=False, wraparound=False
# cython: initializedcheck=False, annotation_typing=False
"""perfetto-trace's recorder: one thread's calls and returns made into batches of TracePackets.

One source for both builds (compiled with `_thread_recorder.pxd`, or pure Python). An entry
point turns each event of its thread into a call here and subclasses `ThreadRecorder` to name
code objects and builtins: the 3.11 profile hook (`_hook.pyx`), the 3.12+ `sys.monitoring`
callbacks (`_monitor.pyx`) and the pure build's `sys.setprofile` hook (`_hook_pure.py`).

The recorder keeps a stack with one entry per frame or builtin running. A recorded call is a
SLICE_BEGIN and its return a SLICE_END; --max-depth leaves deeper calls unrecorded; under
--min-duration a begin is held back (pending) until the slice proves long enough or a
descendant is written; the tracer's own frames and everything they call are hidden. Names are
interned once per batch, so every batch handed to the engine is self-contained (it opens with
the engine's prologue). The batch's bytes are `_packet_batch` (a C buffer) or
`_packet_batch_pure` (a bytearray): the builds differ only there.
"""

from __future__ import annotations

import array
from typing import Any

try:
    import cython
except ImportError:  # installed without Cython: runs as pure Python
    from protozero import _cython_shim as cython

if not cython.compiled:  # compiled, _thread_recorder.pxd cimports them (C constants, inline)
    from perfetto_protos.tags.fields import (
        TrackEvent_Type_TYPE_INSTANT,
        TrackEvent_Type_TYPE_SLICE_BEGIN,
        TrackEvent_Type_TYPE_SLICE_END,
    )

    from perfetto_client._tracer._packet_batch_pure import (
        PacketBatch,
        now_ns,
        write_event,
        write_interned_event,
    )

__all__ = ["COMPILED", "ThreadRecorder"]

COMPILED = cython.compiled
"""Whether this module is the compiled one (the compiled entry points subclass it)."""

OWN = 0xFFFFFFFF
"""The iid of the tracer's own code (the engine's `intern_code` answers it)."""

# A stack entry's state.
NOT_RECORDED = 0  # below --max-depth, or a builtin called by code that is not recorded
PENDING = 1  # its begin held back by --min-duration
EMITTED = 2  # its begin written
HIDDEN = 3  # the tracer's own frame (iid OWN) or one it called (iid 0)

# seen[iid]: the batch that last interned iid (low 31 bits), the iid has a location (bit 31).
_LOCATION = 0x80000000
_BATCH_MASK = 0x7FFFFFFF


def _grown(old: Any, size: int) -> Any:
    # A copy of the array `old`, `size` items long (the new items 0).
    grown = array.array(old.typecode, old)
    grown.frombytes(bytes((size - len(old)) * old.itemsize))
    return grown


class ThreadRecorder:
    """Records one thread's calls into self-contained batches of TracePackets.

    Subclasses name what runs: `_code_iid` (a frame or code object) and `_c_function_iid` (a
    builtin), and install the entry point (`install`).
    """

    def __init__(
        self,
        engine: Any,
        *,
        sequence_id: int,
        seq: bytes,
        batch_size: int,
        max_depth: int,
        min_duration_ns: int,
        c_calls: bool,
    ) -> None:
        self.engine = engine
        self.blobs = engine.blobs
        self.locations = engine.locations
        self.sequence_id = sequence_id
        self.batch = PacketBatch(seq, batch_size)
        self.batch_size = batch_size
        self.batch_no = 0
        self.stack_cap = 256
        self._ts_array = array.array("Q", bytes(8 * self.stack_cap))
        self._iid_array = array.array("I", bytes(4 * self.stack_cap))
        self._state_array = array.array("B", bytes(self.stack_cap))
        self._code_array = array.array("Q", bytes(8 * self.stack_cap))
        self.entry_ts = self._ts_array
        self.entry_iid = self._iid_array
        self.entry_state = self._state_array
        self.entry_code = self._code_array
        self.depth = 0
        self.recorded_depth = 0
        self.first_pending = 0
        self.seen_cap = 1024
        self._seen_array = array.array("I", bytes(4 * self.seen_cap))
        self.seen = self._seen_array
        self.max_depth = max_depth
        self.min_duration_ns = min_duration_ns
        self.c_calls = c_calls
        self.unwinding = False
        self.own_depth = 0
        self.typed_exceptions = False
        self.in_hook = False
        self.flush_soon = False
        self.active = True
        self.failed = False
        self.interrupted: BaseException | None = None
        self.events = 0
        self.exception_iid = engine.intern_exception_start()
        self._start_batch(now_ns())

    def install(self, own_frames: int = 0, from_profile_hook: bool = False) -> None:
        """Makes this recorder the calling thread's.

        `own_frames` of the tracer's frames are running and will return before the program's
        next event; nothing is recorded until they have.
        """
        raise NotImplementedError

    def _code_iid(self, where: Any) -> int:
        # The iid of the code running in `where` (the entry point's frame or code object),
        # interned at its first use in this recording: 0 if it is not recorded, OWN if it is
        # the tracer's.
        raise NotImplementedError

    def _c_function_iid(self, func: Any, arg0: Any) -> int:
        # The iid of the builtin `func` (bound to `arg0` where it is a method descriptor).
        raise NotImplementedError

    # ---- batches ----------------------------------------------------------------------------

    def _start_batch(self, ts: int) -> int:
        prologue = self.engine.prologue(self, ts)
        self.batch_no += 1
        self.batch.start(prologue, ts)
        return 0

    def _hand_off(self, ts: int) -> int:
        data = self.batch.data()
        try:
            self.engine.write_batch(self, data)
        finally:
            self._start_batch(ts)
        return 0

    def flush(self, final: bool = False) -> None:
        """Hands the current batch to the engine; `final` first ends every open slice."""
        now = now_ns()
        if final:
            self.active = False
            while self.depth > 0:
                self._pop(now)
        data = self.batch.data()
        try:
            self.engine.write_batch(self, data)
        finally:
            if not final:
                self._start_batch(now)

    def discard(self) -> None:
        """Drops everything buffered and stops recording (a forked child's inherited copy)."""
        self.active = False
        self.depth = 0
        self.recorded_depth = 0
        self.batch.clear()

    # ---- packets ----------------------------------------------------------------------------

    def _write(self, kind: int, iid: int, ts: int, location: bool) -> int:
        write_event(self.batch, kind, iid, ts, location)
        self.events += 1
        return 0

    def _emit(self, kind: int, iid: int, ts: int) -> int:
        if self.batch.pos >= self.batch_size or self.flush_soon:
            self.flush_soon = False
            self._hand_off(ts)
        if iid == 0:
            return self._write(kind, 0, ts, False)
        if iid >= self.seen_cap:
            self._grow_seen(iid)
        seen = self.seen[iid]
        if (seen & _BATCH_MASK) != self.batch_no:
            return self._emit_interned(kind, iid, ts)
        return self._write(kind, iid, ts, (seen & _LOCATION) != 0)

    def _emit_interned(self, kind: int, iid: int, ts: int) -> int:
        # The first use of `iid` in this batch: its InternedData goes with it.
        blob = self.blobs[iid]
        location = self.locations[iid] != 0
        self.seen[iid] = self.batch_no | (_LOCATION if location else 0)
        write_interned_event(self.batch, kind, iid, ts, location, blob)
        self.events += 1
        return 0

    def _grow_seen(self, iid: int) -> int:
        cap = self.seen_cap
        while cap <= iid:
            cap *= 2
        self._seen_array = _grown(self._seen_array, cap)
        self.seen = self._seen_array
        self.seen_cap = cap
        return 0

    # ---- the common case ----------------------------------------------------------------------

    def _plain(self) -> bool:
        # Nothing else to do at this event: recording, no hand-off due, nothing to deliver.
        # (An entry point calls the fast paths before it takes the event into the recorder,
        # or, the pure one, with in_hook set for the whole event: CPython calls no hook from
        # inside another, but a signal handler may run inside a Python one.)
        return (
            self.active
            and not self.flush_soon
            and self.interrupted is None
            and self.batch.pos < self.batch_size
        )

    def _begin_fast(self, iid: int, code: int) -> bool:
        # The call of recorded code named `iid` (interned in this batch) written at once, as
        # _push and _emit write it when neither has more to do (no --max-depth or --min-duration,
        # none of the tracer's frames running); False leaves the event to them, unchanged.
        # `code`: the address of the code object the event names (sys.monitoring), or 0.
        if (
            iid in (0, OWN)
            or iid >= self.seen_cap
            or self.own_depth
            or self.max_depth
            or self.min_duration_ns
            or self.depth == self.stack_cap
            or not self._plain()
        ):
            return False
        seen = self.seen[iid]
        if (seen & _BATCH_MASK) != self.batch_no:
            return False
        ts = now_ns()
        d = self.depth
        self.entry_iid[d] = iid
        self.entry_ts[d] = ts
        self.entry_state[d] = EMITTED
        self.entry_code[d] = code
        self.depth = d + 1
        self.recorded_depth += 1
        self.unwinding = False
        self._write(TrackEvent_Type_TYPE_SLICE_BEGIN, iid, ts, (seen & _LOCATION) != 0)
        return True

    def _end_fast(self, code: int) -> bool:
        # The end of the innermost slice written at once, as _pop writes it when its begin is
        # written, where the entry was opened for `code` (as _begin_fast was given it); False
        # leaves the event to _pop, unchanged.
        top = self.depth - 1
        if (
            top < 0
            or self.entry_state[top] != EMITTED
            or self.entry_code[top] != code
            or not self._plain()
        ):
            return False
        self.depth = top
        self.recorded_depth -= 1
        self._write(TrackEvent_Type_TYPE_SLICE_END, 0, now_ns(), False)
        self.first_pending = min(self.first_pending, top)
        return True

    # ---- the stack --------------------------------------------------------------------------

    def _grow_stack(self) -> int:
        cap = 2 * self.stack_cap
        self._ts_array = _grown(self._ts_array, cap)
        self._iid_array = _grown(self._iid_array, cap)
        self._state_array = _grown(self._state_array, cap)
        self._code_array = _grown(self._code_array, cap)
        self.entry_ts = self._ts_array
        self.entry_iid = self._iid_array
        self.entry_state = self._state_array
        self.entry_code = self._code_array
        self.stack_cap = cap
        return 0

    def _push_hidden(self, iid: int) -> int:
        if self.depth == self.stack_cap:
            self._grow_stack()
        d = self.depth
        self.entry_iid[d] = iid
        self.entry_state[d] = HIDDEN
        self.entry_code[d] = 0
        self.depth = d + 1
        return 0

    def _push(self, iid: int) -> int:
        if self.depth == self.stack_cap:
            self._grow_stack()
        if self.max_depth and self.recorded_depth >= self.max_depth:
            iid = 0
        d = self.depth
        self.depth = d + 1
        self.entry_iid[d] = iid
        self.entry_code[d] = 0
        if iid == 0:
            self.entry_state[d] = NOT_RECORDED
            return 0
        ts = now_ns()
        self.entry_ts[d] = ts
        self.recorded_depth += 1
        if self.min_duration_ns == 0:
            self.entry_state[d] = EMITTED
            self._emit(TrackEvent_Type_TYPE_SLICE_BEGIN, iid, ts)
        else:
            self.entry_state[d] = PENDING
        return 0

    def _pop(self, now: int) -> int:
        if self.depth == 0:
            return 0  # a return from a frame entered before recording started
        self.depth -= 1
        state = self.entry_state[self.depth]
        if state in (PENDING, EMITTED):
            self.recorded_depth -= 1
        if state == EMITTED:
            self._emit(TrackEvent_Type_TYPE_SLICE_END, 0, now)
        elif state == PENDING:
            ts = self.entry_ts[self.depth]
            if now - ts >= self.min_duration_ns:
                iid = self.entry_iid[self.depth]
                self._emit_pending()
                self._emit(TrackEvent_Type_TYPE_SLICE_BEGIN, iid, ts)
                self._emit(TrackEvent_Type_TYPE_SLICE_END, 0, now)
        self.first_pending = min(self.first_pending, self.depth)
        return 0

    def _emit_pending(self) -> int:
        # Writes the begins still held back by --min-duration (a descendant is being written).
        for i in range(self.first_pending, self.depth):
            if self.entry_state[i] == PENDING:
                self.entry_state[i] = EMITTED
                self._emit(TrackEvent_Type_TYPE_SLICE_BEGIN, self.entry_iid[i], self.entry_ts[i])
        self.first_pending = self.depth
        return 0

    # ---- events -------------------------------------------------------------------------------

    def _enter(self, iid: int) -> int:
        # A frame of code named `iid` starts running.
        if iid == OWN:
            self.own_depth += 1
            self._push_hidden(OWN)
        elif self.own_depth:
            self._push_hidden(0)
        else:
            self.unwinding = False
            self._push(iid)
        return 0

    def _leave(self, where: Any, unwound: bool) -> int:
        # The frame running in `where` returns (unwound: an exception leaves it): its slice
        # ends. Its code is looked up only for a frame entered before recording started while
        # the tracer's own frames run.
        if self.depth == 0:
            if self.own_depth and self._code_iid(where) == OWN:
                self.own_depth -= 1
        elif self.entry_state[self.depth - 1] == HIDDEN:
            self.depth -= 1
            if self.entry_iid[self.depth] == OWN:
                self.own_depth -= 1
        else:
            if unwound:
                self._on_exception()
            else:
                self.unwinding = False
            # A frame deeper than --max-depth needs no timestamp.
            self._pop(now_ns() if self.entry_state[self.depth - 1] != NOT_RECORDED else 0)
        return 0

    def _c_enter(self, where: Any, func: Any, arg0: Any) -> int:
        # The code running in `where` calls the builtin `func` (see _c_function_iid).
        if self.own_depth:
            return self._push_hidden(0)
        self.unwinding = False
        caller = self.entry_iid[self.depth - 1] if self.depth else self._code_iid(where)
        if caller == 0:
            # Builtins called by code that is not recorded (filtered out, or below
            # --max-depth) are not recorded either.
            return self._push(0)
        return self._push(self._c_function_iid(func, arg0))

    def _c_leave(self) -> int:
        # The innermost builtin returns or raises.
        if self.depth:
            if self.entry_state[self.depth - 1] == HIDDEN:
                self.depth -= 1
            else:
                self._pop(now_ns())
        return 0

    def _on_exception_raised(self, exc_type: Any, tb: Any) -> int:
        # One instant per exception, in the frame that raised it: as it reaches the callers,
        # each adds itself to the traceback (a bare `raise` in a handler adds one too).
        if self.depth == 0 or (tb is not None and tb.tb_next is not None):
            return 0
        if self.entry_state[self.depth - 1] == EMITTED:
            self._emit(
                TrackEvent_Type_TYPE_INSTANT, self.engine.intern_exception(exc_type), now_ns()
            )
        return 0

    def _on_exception(self) -> int:
        # Without the exception's own event, one instant marks where an exception started
        # unwinding (the frames it then leaves are the same propagation).
        if not self.unwinding:
            self.unwinding = True
            if (
                self.exception_iid
                and not self.typed_exceptions
                and self.depth > 0
                and self.entry_state[self.depth - 1] == EMITTED
            ):
                self._emit(TrackEvent_Type_TYPE_INSTANT, self.exception_iid, now_ns())
        return 0

    # ---- events from Python (GC, exceptions seen elsewhere) ---------------------------------

    def call(self, frame: Any) -> None:
        """Records the call of `frame` (its first event reached another hook)."""
        self._enter(self._code_iid(frame))

    def begin(self, iid: int) -> bool:
        """Opens a slice named by interned `iid` on this thread; False if it cannot now.

        Such slices (GC runs) are written at once, outside the call stack: the tracer's own
        frame that opens one returns before it ends.
        """
        if self.in_hook or not self.active:
            return False
        now = now_ns()
        self._emit_pending()
        self._emit(TrackEvent_Type_TYPE_SLICE_BEGIN, iid, now)
        return True

    def end(self) -> None:
        """Closes the slice `begin` opened."""
        if not self.in_hook:
            self._emit(TrackEvent_Type_TYPE_SLICE_END, 0, now_ns())

    def instant(self, iid: int) -> None:
        """An instant event named by interned `iid`."""
        if not self.in_hook and self.active:
            self._emit(TrackEvent_Type_TYPE_INSTANT, iid, now_ns())
