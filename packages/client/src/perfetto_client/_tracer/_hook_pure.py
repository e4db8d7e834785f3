"""The pure-Python profile hook: the same recorder interface as the compiled `_hook`.

Used when the extension is not built, with `PERFETTO_PY_PURE=1` or with `--pure`. It cannot
see which returns are caused by exceptions (`sys.setprofile` reports them as returns of
None), so it records no exception instants.
"""

from __future__ import annotations

import sys
import time
import types
from collections.abc import Callable
from typing import Any

from perfetto_protos.tags.fields import (
    Trace_packet_TAG,
    TracePacket_interned_data_TAG,
    TracePacket_timestamp_TAG,
    TracePacket_track_event_TAG,
    TrackEvent_name_iid_TAG,
    TrackEvent_source_location_iid_TAG,
    TrackEvent_type_TAG,
    TrackEvent_Type_TYPE_INSTANT,
    TrackEvent_Type_TYPE_SLICE_BEGIN,
    TrackEvent_Type_TYPE_SLICE_END,
)
from protozero import encode_varint, read_varint
from protozero._proto_utils import SHORT_VARINTS

COMPILED = False

SLICE_BEGIN = TrackEvent_Type_TYPE_SLICE_BEGIN
SLICE_END = TrackEvent_Type_TYPE_SLICE_END
INSTANT = TrackEvent_Type_TYPE_INSTANT
_NOT_RECORDED, _PENDING, _EMITTED = 0, 1, 2
OWN = 0xFFFFFFFF  # the iid of the tracer's own code

# By id(): hashing a code object hashes its contents. The codes are kept alive in
# _interned_codes so that their ids are not reused.
_codes: dict[int, int] = {}
_interned_codes: list[types.CodeType] = []
_c_functions: dict[Any, int] = {}
_CLOCK = time.CLOCK_BOOTTIME

_PACKET = encode_varint(Trace_packet_TAG)
_TIMESTAMP = encode_varint(TracePacket_timestamp_TAG)
_TRACK_EVENT = encode_varint(TracePacket_track_event_TAG)
_INTERNED_DATA = encode_varint(TracePacket_interned_data_TAG)
_TYPE = encode_varint(TrackEvent_type_TAG)
_NAME_IID = encode_varint(TrackEvent_name_iid_TAG)
_SOURCE_LOCATION_IID = encode_varint(TrackEvent_source_location_iid_TAG)


def now_ns() -> int:
    """CLOCK_BOOTTIME in nanoseconds (the clock every timestamp uses)."""
    return time.clock_gettime_ns(_CLOCK)


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


class _Deliver(BaseException):
    """Raised in the fast hook to leave its `try` and raise `ThreadRecorder.interrupted`."""


def _heads(tail: bytes) -> tuple[bytes, bytes, bytes]:
    # The start of a packet whose timestamp delta is a 1, 2 or 3 byte varint, then `tail`.
    return tuple(  # type: ignore[return-value]
        _PACKET + encode_varint(1 + size + len(tail)) + _TIMESTAMP for size in (1, 2, 3)
    )


class ThreadRecorder:
    """Records one thread's calls into self-contained batches of TracePackets."""

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
        self.blobs: list[bytes] = engine.blobs
        self.locations: bytearray = engine.locations
        self.sequence_id = sequence_id
        self.seq = seq
        self.batch_size = batch_size
        self.max_depth = max_depth
        self.min_duration_ns = min_duration_ns
        self.c_calls = c_calls
        self.active = True
        self.failed = False
        self.interrupted: BaseException | None = None
        self.events = 0
        self.buf = bytearray()
        self.stack: list[list[int]] = []  # [ts, iid, state]
        # The fast hook (no --max-depth, no --min-duration) keeps only iids (0: not
        # recorded), and writes a packet by copying pieces made once per name.
        self.fast = not max_depth and not min_duration_ns
        self.fast_stack: list[int] = []
        self.fast_seen: dict[int, tuple[bytes, bytes, bytes, bytes]] = {}
        self.limit = batch_size
        self.first_pending = 0
        self.seen: dict[int, int] = {}
        self.batch_no = 0
        self.last_ts = 0
        self.in_hook = False
        self._flush_soon = False
        self.own_depth = 0
        self.recorded_depth = 0
        self._start_batch(now_ns())

    def install(self, own_frames: int = 0, from_profile_hook: bool = False) -> None:
        """Makes this recorder the profile hook of the calling thread.

        `own_frames` of the tracer's frames are running and will return before the program's
        next event; nothing is recorded until they have.
        """
        # Unless called from a profile hook (which is not traced), this method's own return
        # is the first event the new hook sees.
        self.own_depth = own_frames + (0 if from_profile_hook else 1)
        sys.setprofile(self._fast_profile() if self.fast else self._profile)

    @property
    def flush_soon(self) -> bool:
        """Set by the engine: hand the batch over at the next event (a snapshot is taken)."""
        return self._flush_soon

    @flush_soon.setter
    def flush_soon(self, value: bool) -> None:
        self._flush_soon = value
        self.limit = 0 if value else self.batch_size

    def _code_iid(self, frame: types.FrameType) -> int:
        code = frame.f_code
        iid = _codes.get(id(code))
        if iid is None:
            iid = _codes[id(code)] = self.engine.intern_code(code, frame)
            _interned_codes.append(code)
        return iid

    def _profile(self, frame: types.FrameType, event: str, arg: Any) -> None:
        if not self.active:
            return
        self.in_hook = True
        try:
            # The tracer's own frames (OWN) and everything they call are invisible.
            if event == "call":
                iid = self._code_iid(frame)
                if iid == OWN:
                    self.own_depth += 1
                elif not self.own_depth:
                    self._push(iid)
            elif event == "return":
                if self._code_iid(frame) == OWN:
                    self.own_depth = max(0, self.own_depth - 1)
                elif not self.own_depth:
                    self._pop(now_ns())
            elif self.c_calls and not self.own_depth:
                caller = self._code_iid(frame)
                if caller == OWN:
                    pass
                elif event != "c_call":
                    self._pop(now_ns())
                elif not caller:
                    # Builtins called by code that is not recorded are not recorded either.
                    self._push(0)
                else:
                    owner = getattr(arg, "__self__", None)
                    key = (
                        arg
                        if owner is None or isinstance(owner, types.ModuleType)
                        else (type(owner), arg.__name__)
                    )
                    known = _c_functions.get(key)
                    if known is None:
                        known = _c_functions[key] = self.engine.intern_c_function(arg)
                    self._push(known)
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
            self._raise_interrupted()

    def _pieces(self, iid: int) -> tuple[bytes, bytes, bytes, bytes]:
        # A SLICE_BEGIN of `iid` is head (by the size of the timestamp delta) + delta + tail.
        event = _TYPE + SHORT_VARINTS[SLICE_BEGIN] + _NAME_IID + encode_varint(iid)
        if self.locations[iid]:
            event += _SOURCE_LOCATION_IID + encode_varint(iid)
        tail = _TRACK_EVENT + SHORT_VARINTS[len(event)] + event + self.seq
        return (*_heads(tail), tail)

    def _fast_profile(self) -> Callable[[types.FrameType, str, Any], None]:
        """The profile hook without --max-depth and --min-duration (what `_profile` does)."""
        rec = self
        codes_get = _codes.get
        id_of = id
        c_functions = _c_functions
        stack = self.fast_stack
        push = stack.append
        pop = stack.pop
        clock = time.clock_gettime_ns
        boottime = _CLOCK
        short = SHORT_VARINTS
        seen = self.fast_seen
        buf = self.buf
        end_event = _TYPE + SHORT_VARINTS[SLICE_END]
        end_tail = _TRACK_EVENT + SHORT_VARINTS[len(end_event)] + end_event + self.seq
        end_pieces = (*_heads(end_tail), end_tail)
        encode = encode_varint
        module_type = types.ModuleType
        own = OWN

        def profile(frame: types.FrameType, event: str, arg: Any) -> None:
            if not rec.active:
                return
            rec.in_hook = True
            try:
                # What to write: a SLICE_BEGIN of `begin_iid`, a SLICE_END, or nothing.
                kind = begin_iid = 0
                if event == "call":
                    iid = codes_get(id_of(frame.f_code))
                    if iid is None:
                        iid = rec._code_iid(frame)
                    if iid == own:
                        rec.own_depth += 1
                    elif not rec.own_depth:
                        push(iid)
                        if iid:
                            kind, begin_iid = SLICE_BEGIN, iid
                elif event == "return":
                    iid = codes_get(id_of(frame.f_code))
                    if iid is None:
                        iid = rec._code_iid(frame)
                    if iid == own:
                        if rec.own_depth:
                            rec.own_depth -= 1
                    elif stack and not rec.own_depth and pop():
                        kind = SLICE_END
                elif rec.c_calls and not rec.own_depth:
                    if event != "c_call":
                        if stack and pop():
                            kind = SLICE_END
                    else:
                        caller = codes_get(id_of(frame.f_code))
                        if caller is None:
                            caller = rec._code_iid(frame)
                        if not caller:
                            push(0)  # builtins called by code that is not recorded
                        elif caller != own:
                            owner = arg.__self__
                            key = (
                                arg
                                if owner is None or type(owner) is module_type
                                else (type(owner), arg.__name__)
                            )
                            iid = c_functions.get(key)
                            if iid is None:
                                iid = c_functions[key] = rec.engine.intern_c_function(arg)
                            push(iid)
                            if iid:
                                kind, begin_iid = SLICE_BEGIN, iid
                if kind:
                    ts = clock(boottime)
                    delta = ts - rec.last_ts
                    pieces = seen.get(begin_iid) if kind == SLICE_BEGIN else end_pieces
                    if pieces is None or delta >= 1 << 21 or len(buf) >= rec.limit:
                        # First use of the name in this batch, a long pause, or a full batch.
                        if kind == SLICE_BEGIN:
                            rec._emit(SLICE_BEGIN, begin_iid, ts)
                            seen[begin_iid] = rec._pieces(begin_iid)
                        else:
                            rec._emit(SLICE_END, 0, ts)
                        if rec.interrupted is not None:
                            raise _Deliver
                    else:
                        rec.last_ts = ts
                        varint = short[delta] if delta < 16384 else encode(delta)
                        buf.extend(pieces[len(varint) - 1])
                        buf.extend(varint)
                        buf.extend(pieces[3])
                        rec.events += 1
            except _Deliver:
                rec.in_hook = False
                rec._raise_interrupted()
            except Exception:
                rec.active = False
                rec.failed = True
            except BaseException:
                rec.active = False  # a signal handler raised: see _profile
                rec.in_hook = False
                raise
            rec.in_hook = False

        return profile

    def _raise_interrupted(self) -> None:
        # What a signal handler raised during a batch write, now that the event is recorded.
        # Python then removes this thread's hook: nothing more is recorded on it.
        exc, self.interrupted = self.interrupted, None
        self.active = False
        assert exc is not None
        raise exc.with_traceback(None)

    # ---- batches ----------------------------------------------------------------------------

    def _start_batch(self, ts: int) -> None:
        self.batch_no += 1
        self.fast_seen.clear()
        self.buf.clear()
        self.buf += self.engine.prologue(self, ts)
        self.last_ts = ts

    def flush(self, final: bool = False) -> None:
        """Hands the current batch to the engine; `final` first ends every open slice."""
        now = now_ns()
        if final:
            self.active = False
            while self.stack:
                self._pop(now)
            while self.fast_stack:
                if self.fast_stack.pop():
                    self._emit(SLICE_END, 0, now)
        try:
            self.engine.write_batch(self, bytes(self.buf))
        finally:
            if not final:
                self._start_batch(now)

    def discard(self) -> None:
        """Drops everything buffered and stops recording (a forked child's inherited copy)."""
        self.active = False
        self.recorded_depth = 0
        self.stack.clear()
        self.fast_stack.clear()
        self.buf.clear()

    def _emit(self, kind: int, iid: int, ts: int) -> None:
        if len(self.buf) >= self.batch_size or self.flush_soon:
            self.flush_soon = False
            try:
                self.engine.write_batch(self, bytes(self.buf))
            finally:
                self._start_batch(ts)
        event = _TYPE + SHORT_VARINTS[kind]
        interned = b""
        if iid:
            event += _NAME_IID + encode_varint(iid)
            if kind == SLICE_BEGIN and self.locations[iid]:
                event += _SOURCE_LOCATION_IID + encode_varint(iid)
            if self.seen.get(iid) != self.batch_no:
                self.seen[iid] = self.batch_no
                blob = self.blobs[iid]
                interned = _INTERNED_DATA + encode_varint(len(blob)) + blob
        body = (
            _TIMESTAMP
            + encode_varint(ts - self.last_ts)
            + _TRACK_EVENT
            + SHORT_VARINTS[len(event)]
            + event
            + interned
            + self.seq
        )
        self.last_ts = ts
        self.buf += _PACKET + encode_varint(len(body)) + body
        self.events += 1

    # ---- the stack --------------------------------------------------------------------------

    def _push(self, iid: int) -> None:
        ts = now_ns()
        if self.max_depth and self.recorded_depth >= self.max_depth:
            iid = 0
        if iid == 0:
            self.stack.append([ts, 0, _NOT_RECORDED])
            return
        self.recorded_depth += 1
        if self.min_duration_ns == 0:
            self.stack.append([ts, iid, _EMITTED])
            self._emit(SLICE_BEGIN, iid, ts)
        else:
            self.stack.append([ts, iid, _PENDING])

    def _pop(self, now: int) -> None:
        if not self.stack:
            return  # a return from a frame entered before recording started
        ts, iid, state = self.stack.pop()
        depth = len(self.stack)
        if state != _NOT_RECORDED:
            self.recorded_depth -= 1
        if state == _EMITTED:
            self._emit(SLICE_END, 0, now)
        elif state == _PENDING and now - ts >= self.min_duration_ns:
            self._emit_pending()
            self._emit(SLICE_BEGIN, iid, ts)
            self._emit(SLICE_END, 0, now)
        self.first_pending = min(self.first_pending, depth)

    def _emit_pending(self) -> None:
        # Writes the begins still held back by --min-duration (a descendant is being written).
        for entry in self.stack[self.first_pending :]:
            if entry[2] == _PENDING:
                entry[2] = _EMITTED
                self._emit(SLICE_BEGIN, entry[1], entry[0])
        self.first_pending = len(self.stack)

    # ---- events from Python -----------------------------------------------------------------

    def call(self, frame: types.FrameType) -> None:
        """Records the call of `frame` (its first event reached another hook)."""
        iid = self._code_iid(frame)
        if iid == OWN:
            self.own_depth += 1
        elif self.fast:
            self.fast_stack.append(iid)
            if iid:
                self._emit(SLICE_BEGIN, iid, now_ns())
                self.fast_seen[iid] = self._pieces(iid)
        else:
            self._push(iid)

    def begin(self, iid: int) -> bool:
        """Opens a slice named by interned `iid` on this thread; False if it cannot now.

        Such slices (GC runs) are written at once, outside the call stack: the tracer's own
        frame that opens one returns before it ends.
        """
        if self.in_hook or not self.active:
            return False
        now = now_ns()
        self._emit_pending()
        self._emit(SLICE_BEGIN, iid, now)
        return True

    def end(self) -> None:
        """Closes the slice `begin` opened."""
        if not self.in_hook:
            self._emit(SLICE_END, 0, now_ns())

    def instant(self, iid: int) -> None:
        """An instant event named by interned `iid`."""
        if not self.in_hook and self.active:
            self._emit(INSTANT, iid, now_ns())
