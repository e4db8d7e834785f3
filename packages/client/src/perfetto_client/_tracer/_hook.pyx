# cython: language_level=3, binding=False, boundscheck=False, wraparound=False
# cython: initializedcheck=False, annotation_typing=False
"""The C-level profile hook: per-thread recorders that encode TrackEvent packets directly.

A `ThreadRecorder` is installed with `PyEval_SetProfile` on its own thread (the recorder is
the hook's argument, so the hook needs no thread-local lookup). Each call and return becomes
a SLICE_BEGIN / SLICE_END TracePacket written into a malloc'd batch buffer; names are interned
once per batch so every batch handed to the engine is self-contained (it opens with the
engine's prologue: incremental state cleared, packet defaults, clock snapshot, thread track).
The pure fallback with the same interface is `_hook_pure.py`.
"""

from cpython.exc cimport PyErr_SetObject
from cpython.object cimport PyObject
from libc.stdint cimport uint32_t, uint64_t, uintptr_t
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcpy, memmove, memset

from perfetto_protos.tags.fields_c cimport (
    Trace_packet_TAG,
    TracePacket_interned_data_TAG,
    TracePacket_timestamp_TAG,
    TracePacket_track_event_TAG,
    TrackEvent_name_iid_TAG,
    TrackEvent_source_location_iid_TAG,
    TrackEvent_type_TAG,
)
from protozero._varint cimport put_varint, read_varint, varint_size

cdef extern from *:
    """
    #include <time.h>
    #include <frameobject.h>
    typedef int (*ptr_tracefunc)(PyObject*, PyFrameObject*, int, PyObject*);
    static inline uint64_t ptr_now_ns(void) {
        struct timespec t;
        clock_gettime(CLOCK_BOOTTIME, &t);
        return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
    }
    static inline PyObject* ptr_frame_code(PyFrameObject* f) {
        return (PyObject*)PyFrame_GetCode(f);
    }
    static inline int ptr_is_cfunction(PyObject* o) { return PyCFunction_Check(o); }
    static inline void* ptr_cfunction_def(PyObject* o) {
        return (void*)((PyCFunctionObject*)o)->m_ml;
    }
    static inline PyObject* ptr_cfunction_self(PyObject* o) {
        return ((PyCFunctionObject*)o)->m_self;
    }
    static inline void* ptr_type_of(PyObject* o) { return o ? (void*)Py_TYPE(o) : NULL; }
    /* The head of PyFrameObject up to f_trace_lines: the same in 3.11, 3.12 and 3.13. */
    typedef struct {
        PyObject_HEAD
        PyObject* f_back;
        void* f_frame;
        PyObject* f_trace;
        int f_lineno;
        char f_trace_lines;
    } ptr_frame_head;
    static inline void ptr_no_line_events(PyFrameObject* f) {
        ((ptr_frame_head*)f)->f_trace_lines = 0;
    }
    static inline int ptr_thread_traced(void) {
        return PyThreadState_Get()->c_tracefunc != NULL;
    }
    #if PY_VERSION_HEX >= 0x030C0000
    /* 3.12+ name the code-extra calls PyUnstable_* and set every thread's hooks with public
       calls (3.13 no longer exports _PyEval_SetTrace). */
    #define ptr_request_code_index PyUnstable_Eval_RequestCodeExtraIndex
    #define ptr_code_get_extra PyUnstable_Code_GetExtra
    #define ptr_code_set_extra PyUnstable_Code_SetExtra
    static inline void ptr_clear_all_threads(ptr_tracefunc ours) {
        int ours_seen = 0, foreign = 0;
        PyThreadState* ts = PyInterpreterState_ThreadHead(PyInterpreterState_Get());
        for (; ts != NULL; ts = PyThreadState_Next(ts)) {
            if (ts->c_tracefunc == (Py_tracefunc)ours) ours_seen = 1;
            else if (ts->c_tracefunc != NULL) foreign = 1;
        }
        PyEval_SetProfileAllThreads(NULL, NULL);
        /* A debugger's trace function on any thread is left alone, and with it ours (whose
           recorder the engine has deactivated). */
        if (ours_seen && !foreign) PyEval_SetTraceAllThreads(NULL, NULL);
    }
    #else
    #define ptr_request_code_index _PyEval_RequestCodeExtraIndex
    #define ptr_code_get_extra _PyCode_GetExtra
    #define ptr_code_set_extra _PyCode_SetExtra
    static inline void ptr_clear_all_threads(ptr_tracefunc ours) {
        PyThreadState* ts = PyInterpreterState_ThreadHead(PyInterpreterState_Get());
        for (; ts != NULL; ts = PyThreadState_Next(ts)) {
            _PyEval_SetProfile(ts, NULL, NULL);
            if (ts->c_tracefunc == (Py_tracefunc)ours) _PyEval_SetTrace(ts, NULL, NULL);
        }
    }
    #endif
    """
    ctypedef struct PyFrameObject
    ctypedef int (*ptr_tracefunc)(PyObject*, PyFrameObject*, int, PyObject*)
    uint64_t ptr_now_ns() nogil
    PyObject* ptr_frame_code(PyFrameObject* f)
    int ptr_is_cfunction(PyObject* o)
    void* ptr_cfunction_def(PyObject* o)
    PyObject* ptr_cfunction_self(PyObject* o)
    void* ptr_type_of(PyObject* o)
    void ptr_no_line_events(PyFrameObject* f)
    int ptr_thread_traced()
    void ptr_clear_all_threads(ptr_tracefunc ours)
    void PyEval_SetTrace(ptr_tracefunc func, PyObject* obj)
    void PyEval_SetProfile(ptr_tracefunc func, PyObject* obj)
    Py_ssize_t ptr_request_code_index(void* free_func)
    int ptr_code_get_extra(PyObject* code, Py_ssize_t index, void** extra)
    int ptr_code_set_extra(PyObject* code, Py_ssize_t index, void* extra)
    void Py_DECREF(PyObject*)
    int PyTrace_CALL, PyTrace_RETURN, PyTrace_C_CALL, PyTrace_C_RETURN, PyTrace_C_EXCEPTION
    int PyTrace_EXCEPTION

COMPILED = True

# TrackEvent.Type values and the packet fields written here (upstream's numbers).
cdef enum:
    SLICE_BEGIN = 1
    SLICE_END = 2
    INSTANT = 3

# Stack entry states.
# The iid of the tracer's own code.
cdef enum:
    OWN = 0xFFFFFFFF

cdef enum:
    NOT_RECORDED = 0
    PENDING = 1
    EMITTED = 2
    HIDDEN = 3

ctypedef struct Entry:
    uint64_t ts
    uint32_t iid
    uint32_t state
    void* code  # sys.monitoring's fast paths: the code whose event opened it (else NULL)

ctypedef struct CKey:
    void* method
    void* owner
    uint32_t iid

cdef Py_ssize_t _code_index = ptr_request_code_index(NULL)
cdef uint64_t _generation = 0
cdef CKey* _ctable = NULL
cdef Py_ssize_t _ctable_cap = 0
cdef Py_ssize_t _ctable_used = 0


def new_generation():
    """Forgets every cached per-code and per-C-function decision (a new recording starts)."""
    global _generation, _ctable, _ctable_cap, _ctable_used
    _generation += 1
    free(_ctable)
    _ctable_cap = 1024
    _ctable_used = 0
    _ctable = <CKey*>malloc(_ctable_cap * sizeof(CKey))
    memset(_ctable, 0, _ctable_cap * sizeof(CKey))


cdef inline Py_ssize_t _cslot(void* method, void* owner) noexcept:
    cdef uintptr_t h = (<uintptr_t>method >> 4) * 0x9E3779B97F4A7C15u + (<uintptr_t>owner >> 4)
    cdef Py_ssize_t i = <Py_ssize_t>((h ^ (h >> 29)) & <uintptr_t>(_ctable_cap - 1))
    while _ctable[i].method != NULL:
        if _ctable[i].method == method and _ctable[i].owner == owner:
            return i
        i = (i + 1) & (_ctable_cap - 1)
    return i


cdef int _cgrow() except -1:
    global _ctable, _ctable_cap
    cdef CKey* old = _ctable
    cdef Py_ssize_t old_cap = _ctable_cap
    cdef Py_ssize_t i, j
    _ctable_cap = old_cap * 2
    _ctable = <CKey*>malloc(_ctable_cap * sizeof(CKey))
    memset(_ctable, 0, _ctable_cap * sizeof(CKey))
    for i in range(old_cap):
        if old[i].method != NULL:
            j = _cslot(old[i].method, old[i].owner)
            _ctable[j] = old[i]
    free(old)
    return 0


cdef inline uint32_t _cached_iid(PyObject* code) noexcept:
    # The iid this recording gave `code`, 0 where it has given none yet.
    cdef void* extra = NULL
    cdef uintptr_t v
    ptr_code_get_extra(code, _code_index, &extra)
    v = <uintptr_t>extra
    return <uint32_t>(v & 0xFFFFFFFFu) if (v >> 32) == _generation else 0


cdef inline uint32_t _cached_c_iid(void* method, void* owner) noexcept:
    # The iid this recording gave the builtin keyed (method, owner), 0 where it has given none.
    cdef Py_ssize_t slot = _cslot(method, owner)
    return _ctable[slot].iid if _ctable[slot].method != NULL else 0


cdef inline void _c_key(PyObject* func, void** method, void** owner) noexcept:
    # A builtin's key in the table: its method and the type it is bound to, or its type.
    if ptr_is_cfunction(func):
        method[0] = ptr_cfunction_def(func)
        owner[0] = ptr_type_of(ptr_cfunction_self(func))
    else:
        method[0] = ptr_type_of(func)
        owner[0] = NULL


cdef int _hook(PyObject* obj, PyFrameObject* frame, int what, PyObject* arg) noexcept:
    cdef ThreadRecorder r = <ThreadRecorder>obj
    cdef uint32_t iid
    cdef Entry* top
    cdef PyObject* code
    cdef void* method
    cdef void* owner
    if not r.active:
        return r._deliver() if r.interrupted is not None else 0
    # The common events first, without the try block below (it saves the handled exception).
    if what == PyTrace_CALL:
        code = ptr_frame_code(frame)
        Py_DECREF(code)  # the frame keeps it alive
        if r._begin_fast(_cached_iid(code), NULL):
            return 0
    elif what == PyTrace_RETURN:
        if arg != NULL and r._end_fast():
            r.unwinding = False
            return 0
    elif what == PyTrace_C_CALL:
        if r.c_calls and r.depth and r.stack[r.depth - 1].iid != 0:
            _c_key(arg, &method, &owner)
            if r._begin_fast(_cached_c_iid(method, owner), NULL):
                return 0
    elif what == PyTrace_C_RETURN or what == PyTrace_C_EXCEPTION:
        if r.c_calls and r._end_fast():
            return 0
    r.in_hook = True
    try:
        # The tracer's own frames (OWN) and everything they call are HIDDEN; returns and
        # builtin calls are resolved from the stack, not from the code object.
        if what == PyTrace_CALL:
            iid = r._code_iid(frame)
            if iid == OWN:
                r.own_depth += 1
                r._push_hidden(OWN)
            elif r.own_depth:
                r._push_hidden(0)
            else:
                r.unwinding = False
                r._push(iid)
        elif what == PyTrace_RETURN:
            r._leave(frame, 0, arg == NULL)
        elif what == PyTrace_C_CALL:
            if r.c_calls:
                if r.own_depth:
                    r._push_hidden(0)
                else:
                    r.unwinding = False
                    iid = r.stack[r.depth - 1].iid if r.depth else r._code_iid(frame)
                    r._on_c_call(iid, arg)
        elif what == PyTrace_C_RETURN or what == PyTrace_C_EXCEPTION:
            if r.c_calls and r.depth:
                if r.stack[r.depth - 1].state == HIDDEN:
                    r.depth -= 1
                else:
                    r._pop(ptr_now_ns())
    except Exception:
        r.active = False
        r.failed = True
    except BaseException as exc:
        # A signal handler raised outside a batch write (KeyboardInterrupt, SystemExit,
        # perfetto-trace's SIGTERM): the event is half-recorded, so this thread's recording
        # ends, and the program gets the exception now.
        r.active = False
        r.interrupted = exc
    r.in_hook = False
    # What a signal handler raised during a batch write reaches the program once the event
    # is recorded, at a return: CPython then unwinds without another event for the frame.
    if r.interrupted is not None and (
        not r.active or what == PyTrace_RETURN or what == PyTrace_C_RETURN
    ):
        return r._deliver()
    return 0


cdef int _trace(PyObject* obj, PyFrameObject* frame, int what, PyObject* arg) noexcept:
    # The trace function is there for PyTrace_EXCEPTION only (3.11's profile hook never sees
    # the exception): line events are turned off in every frame it is called for.
    cdef ThreadRecorder r
    if what == PyTrace_CALL:
        ptr_no_line_events(frame)
    elif what == PyTrace_EXCEPTION:
        r = <ThreadRecorder>obj
        if r.active and not r.in_hook:
            r.in_hook = True
            try:
                r._on_exception_raised(<object>arg)
            except Exception:
                r.active = False
                r.failed = True
            except BaseException as exc:
                r.active = False  # as in _hook; the profile hook delivers it
                r.interrupted = exc
            r.in_hook = False
    return 0


cdef class ThreadRecorder:
    """Records one thread's calls into self-contained batches of TracePackets."""

    cdef unsigned char* buf
    cdef Py_ssize_t pos
    cdef Py_ssize_t cap
    cdef Py_ssize_t batch_size
    cdef uint64_t last_ts
    cdef Entry* stack
    cdef Py_ssize_t depth
    cdef Py_ssize_t recorded_depth
    cdef Py_ssize_t stack_cap
    cdef Py_ssize_t first_pending
    cdef uint32_t* seen
    cdef Py_ssize_t seen_cap
    cdef uint32_t batch_no
    cdef unsigned char seq[8]
    cdef int seq_len
    cdef Py_ssize_t max_depth
    cdef uint64_t min_duration_ns
    cdef object engine
    cdef list blobs
    cdef bytearray locations
    cdef bint unwinding
    cdef public bint in_hook
    cdef public bint flush_soon
    cdef Py_ssize_t own_depth
    cdef uint32_t exception_iid
    cdef bint typed_exceptions
    cdef public bint active
    cdef public bint failed
    cdef public object interrupted
    cdef public bint c_calls
    cdef public object thread_uuid
    cdef public unsigned long events
    cdef public object sequence_id

    def __cinit__(self):
        self.buf = NULL
        self.stack = NULL
        self.seen = NULL

    def __init__(self, engine, sequence_id, bytes seq, batch_size, max_depth, min_duration_ns,
                 c_calls):
        self.engine = engine
        self.blobs = engine.blobs
        self.locations = engine.locations
        self.sequence_id = sequence_id
        if len(seq) > 8:
            raise ValueError("sequence id field too long")
        self.seq_len = len(seq)
        memcpy(self.seq, <char*>seq, self.seq_len)
        self.batch_size = batch_size
        self.cap = batch_size + 65536
        self.buf = <unsigned char*>malloc(self.cap)
        self.stack_cap = 256
        self.stack = <Entry*>malloc(self.stack_cap * sizeof(Entry))
        self.seen_cap = 1024
        self.seen = <uint32_t*>malloc(self.seen_cap * sizeof(uint32_t))
        memset(self.seen, 0, self.seen_cap * sizeof(uint32_t))
        if self.buf == NULL or self.stack == NULL or self.seen == NULL:
            raise MemoryError()
        self.max_depth = max_depth
        self.min_duration_ns = min_duration_ns
        self.c_calls = c_calls
        self.active = True
        self.failed = False
        self.interrupted = None
        self.events = 0
        self.exception_iid = engine.intern_exception_start()
        self._start_batch(ptr_now_ns())

    def __dealloc__(self):
        free(self.buf)
        free(self.stack)
        free(self.seen)

    def install(self, Py_ssize_t own_frames=0, bint from_profile_hook=False):
        """Makes this recorder the profile hook of the calling thread.

        `own_frames` of the tracer's frames are running and will return before the program's
        next event; nothing is recorded until they have.
        """
        self.own_depth = own_frames
        PyEval_SetProfile(_hook, <PyObject*>self)
        # Exception types need a trace function; a debugger's or coverage's is left alone.
        self.typed_exceptions = (
            self.exception_iid != 0 and self.engine.options.exception_types
            and not ptr_thread_traced()
        )
        if self.typed_exceptions:
            PyEval_SetTrace(_trace, <PyObject*>self)

    # ---- batches ----------------------------------------------------------------------------

    cdef int _start_batch(self, uint64_t ts) except -1:
        cdef bytes prologue = self.engine.prologue(self, ts)
        cdef Py_ssize_t n = len(prologue)
        self.batch_no += 1
        self.pos = 0
        self._reserve(n)
        memcpy(self.buf, <char*>prologue, n)
        self.pos = n
        self.last_ts = ts
        return 0

    cdef int _reserve(self, Py_ssize_t n) except -1:
        cdef unsigned char* grown
        if self.pos + n <= self.cap:
            return 0
        grown = <unsigned char*>realloc(self.buf, self.pos + n + 65536)
        if grown == NULL:
            raise MemoryError()
        self.buf = grown
        self.cap = self.pos + n + 65536
        return 0

    cdef int _hand_off(self, uint64_t ts) except -1:
        cdef bytes data = (<char*>self.buf)[:self.pos]
        try:
            self.engine.write_batch(self, data)
        finally:
            self._start_batch(ts)
        return 0

    cdef int _deliver(self) noexcept:
        # Raises `interrupted` from the hook (returns -1 with it set) without our frames.
        exc, self.interrupted = self.interrupted, None
        PyErr_SetObject(type(exc), exc.with_traceback(None))
        return -1

    def flush(self, bint final=False):
        """Hands the current batch to the engine; `final` first ends every open slice."""
        cdef uint64_t now = ptr_now_ns()
        if final:
            self.active = False
            while self.depth > 0:
                self._pop(now)
        cdef bytes data = (<char*>self.buf)[:self.pos]
        try:
            self.engine.write_batch(self, data)
        finally:
            if not final:
                self._start_batch(now)

    def discard(self):
        """Drops everything buffered and stops recording (a forked child's inherited copy)."""
        self.active = False
        self.depth = 0
        self.recorded_depth = 0
        self.pos = 0

    # ---- packets ----------------------------------------------------------------------------

    cdef int _emit(self, int kind, uint32_t iid, uint64_t ts) except -1:
        cdef uint32_t seen
        if self.pos >= self.batch_size or self.flush_soon:
            self.flush_soon = False
            self._hand_off(ts)
        if iid == 0:
            return self._write(kind, 0, ts, False, NULL, 0)
        if iid >= self.seen_cap:
            self._grow_seen(iid)
        # seen[iid]: the batch that last interned iid (low 31 bits), has a location (bit 31).
        seen = self.seen[iid]
        if (seen & 0x7FFFFFFFu) != self.batch_no:
            return self._emit_interned(kind, iid, ts)
        return self._write(kind, iid, ts, (seen >> 31) != 0, NULL, 0)

    cdef int _emit_interned(self, int kind, uint32_t iid, uint64_t ts) except -1:
        cdef bytes blob = <bytes>self.blobs[iid]
        cdef bint location = self.locations[iid] != 0
        self.seen[iid] = self.batch_no | (<uint32_t>location << 31)
        return self._write(kind, iid, ts, location, <unsigned char*><char*>blob, len(blob))

    cdef inline int _write(self, int kind, uint32_t iid, uint64_t ts, bint location,
                           unsigned char* blob, Py_ssize_t blob_len) except -1:
        cdef unsigned char* p0
        cdef unsigned char* p
        cdef unsigned char* q
        cdef Py_ssize_t body
        cdef int size_len
        if self.pos + 48 + blob_len > self.cap:
            self._reserve(48 + blob_len)
        p0 = self.buf + self.pos
        p = p0 + 2
        # A delta on the sequence's incremental clock. Every tag below is 1 byte but the
        # source location's (put_varint of a constant: the C compiler unrolls it).
        p[0] = TracePacket_timestamp_TAG
        p = put_varint(p + 1, ts - self.last_ts)
        self.last_ts = ts
        p[0] = TracePacket_track_event_TAG
        q = p + 2
        q[0] = TrackEvent_type_TAG
        q[1] = <unsigned char>kind
        q += 2
        if iid != 0:
            q[0] = TrackEvent_name_iid_TAG
            q = put_varint(q + 1, iid)
            if location and kind == SLICE_BEGIN:
                q = put_varint(q, TrackEvent_source_location_iid_TAG)
                q = put_varint(q, iid)
        p[1] = <unsigned char>(q - p - 2)
        p = q
        if blob_len:
            p[0] = TracePacket_interned_data_TAG
            p = put_varint(p + 1, blob_len)
            memcpy(p, blob, blob_len)
            p += blob_len
        memcpy(p, self.seq, 8)  # a fixed size: one store (the reserve leaves room)
        p += self.seq_len
        body = p - p0 - 2
        p0[0] = Trace_packet_TAG
        if body < 128:
            p0[1] = <unsigned char>body
        else:
            size_len = varint_size(body)
            memmove(p0 + 1 + size_len, p0 + 2, body)
            put_varint(p0 + 1, body)
            p = p0 + 1 + size_len + body
        self.pos = p - self.buf
        self.events += 1
        return 0

    cdef int _grow_seen(self, uint32_t iid) except -1:
        cdef Py_ssize_t cap = self.seen_cap
        while cap <= iid:
            cap *= 2
        cdef uint32_t* grown = <uint32_t*>realloc(self.seen, cap * sizeof(uint32_t))
        if grown == NULL:
            raise MemoryError()
        memset(grown + self.seen_cap, 0, (cap - self.seen_cap) * sizeof(uint32_t))
        self.seen = grown
        self.seen_cap = cap
        return 0

    # ---- the common case ----------------------------------------------------------------------

    cdef inline bint _plain(self) noexcept:
        # Nothing else to do at this event: recording, not inside the recorder, no hand-off due,
        # nothing to deliver.
        return (
            self.active and not self.in_hook and not self.flush_soon
            and self.interrupted is None and self.pos < self.batch_size
        )

    cdef inline bint _begin_fast(self, uint32_t iid, void* code) noexcept:
        # The call of recorded code named `iid` (interned in this batch) written at once, as
        # _push and _emit write it when neither has more to do (no --max-depth or --min-duration,
        # none of the tracer's frames running); False leaves the event to them, unchanged.
        # `code`: the code object the event names (sys.monitoring), kept in the entry.
        cdef uint32_t seen
        cdef uint64_t ts
        cdef Entry* e
        if (
            iid == 0 or iid == OWN or iid >= self.seen_cap or self.own_depth
            or self.max_depth or self.min_duration_ns or self.depth == self.stack_cap
            or not self._plain()
        ):
            return False
        seen = self.seen[iid]
        if (seen & 0x7FFFFFFFu) != self.batch_no:
            return False
        ts = ptr_now_ns()
        e = &self.stack[self.depth]
        self.depth += 1
        e.iid = iid
        e.ts = ts
        e.state = EMITTED
        e.code = code
        self.recorded_depth += 1
        self.unwinding = False
        self._write(SLICE_BEGIN, iid, ts, (seen >> 31) != 0, NULL, 0)
        return True

    cdef inline bint _end_fast(self) noexcept:
        # The end of the innermost slice written at once, as _pop writes it when its begin is
        # written; False leaves the event to _pop, unchanged.
        if self.depth == 0 or self.stack[self.depth - 1].state != EMITTED or not self._plain():
            return False
        self.depth -= 1
        self.recorded_depth -= 1
        self._write(SLICE_END, 0, ptr_now_ns(), False, NULL, 0)
        if self.first_pending > self.depth:
            self.first_pending = self.depth
        return True

    # ---- the stack --------------------------------------------------------------------------

    cdef int _grow_stack(self) except -1:
        cdef Entry* grown = <Entry*>realloc(self.stack, 2 * self.stack_cap * sizeof(Entry))
        if grown == NULL:
            raise MemoryError()
        self.stack = grown
        self.stack_cap *= 2
        return 0

    cdef inline int _push_hidden(self, uint32_t iid) except -1:
        if self.depth == self.stack_cap:
            self._grow_stack()
        self.stack[self.depth].iid = iid
        self.stack[self.depth].state = HIDDEN
        self.stack[self.depth].code = NULL
        self.depth += 1
        return 0

    cdef int _push(self, uint32_t iid) except -1:
        cdef uint64_t ts
        cdef Entry* e
        if self.depth == self.stack_cap:
            self._grow_stack()
        if self.max_depth and self.recorded_depth >= self.max_depth:
            iid = 0
        e = &self.stack[self.depth]
        self.depth += 1
        e.iid = iid
        e.code = NULL
        if iid == 0:
            e.state = NOT_RECORDED
            return 0
        ts = ptr_now_ns()
        e.ts = ts
        self.recorded_depth += 1
        if self.min_duration_ns == 0:
            e.state = EMITTED
            self._emit(SLICE_BEGIN, iid, ts)
        else:
            e.state = PENDING
        return 0

    cdef int _pop(self, uint64_t now) except -1:
        cdef Entry* e
        cdef Py_ssize_t i
        if self.depth == 0:
            return 0  # a return from a frame entered before recording started
        self.depth -= 1
        e = &self.stack[self.depth]
        if e.state == PENDING or e.state == EMITTED:
            self.recorded_depth -= 1
        if e.state == EMITTED:
            self._emit(SLICE_END, 0, now)
        elif e.state == PENDING and now - e.ts >= self.min_duration_ns:
            self._emit_pending()
            self._emit(SLICE_BEGIN, e.iid, e.ts)
            self._emit(SLICE_END, 0, now)
        if self.first_pending > self.depth:
            self.first_pending = self.depth
        return 0

    cdef int _leave(self, PyFrameObject* frame, uint32_t iid, bint unwound) except -1:
        # A frame returns (unwound: an exception leaves it): its slice ends. Its code's iid
        # is `iid`, or is looked up from `frame` where it matters (a frame entered before
        # recording started, while the tracer's own frames run).
        if self.depth == 0:
            if self.own_depth and (self._code_iid(frame) if frame != NULL else iid) == OWN:
                self.own_depth -= 1
        elif self.stack[self.depth - 1].state == HIDDEN:
            self.depth -= 1
            if self.stack[self.depth].iid == OWN:
                self.own_depth -= 1
        else:
            if unwound:
                self._on_exception()
            else:
                self.unwinding = False
            # A frame deeper than --max-depth needs no timestamp.
            self._pop(ptr_now_ns() if self.stack[self.depth - 1].state != NOT_RECORDED else 0)
        return 0

    cdef int _emit_pending(self) except -1:
        # Writes the begins still held back by --min-duration (a descendant is being written).
        cdef Py_ssize_t i
        for i in range(self.first_pending, self.depth):
            if self.stack[i].state == PENDING:
                self.stack[i].state = EMITTED
                self._emit(SLICE_BEGIN, self.stack[i].iid, self.stack[i].ts)
        self.first_pending = self.depth
        return 0

    cdef uint32_t _code_iid(self, PyFrameObject* frame) except? 0xFFFFFFFE:
        # The frame keeps its code object alive, so the new reference is dropped at once.
        cdef PyObject* code = ptr_frame_code(frame)
        cdef void* extra = NULL
        cdef uintptr_t v
        cdef uint32_t iid
        Py_DECREF(code)
        ptr_code_get_extra(code, _code_index, &extra)
        v = <uintptr_t>extra
        if (v >> 32) == _generation:
            return <uint32_t>(v & 0xFFFFFFFFu)
        iid = self.engine.intern_code(<object>code, <object>frame)
        ptr_code_set_extra(code, _code_index, <void*>((_generation << 32) | iid))
        return iid


    cdef int _on_c_call(self, uint32_t caller, PyObject* func) except -1:
        global _ctable_used
        cdef void* method
        cdef void* owner
        cdef Py_ssize_t slot
        cdef uint32_t iid
        if caller == 0:
            # Builtins called by code that is not recorded (filtered out, or the tracer's
            # own) are not recorded either.
            self._push(0)
            return 0
        _c_key(func, &method, &owner)
        slot = _cslot(method, owner)
        if _ctable[slot].method == NULL:
            iid = self.engine.intern_c_function(<object>func)
            if 2 * (_ctable_used + 1) > _ctable_cap:
                _cgrow()
                slot = _cslot(method, owner)
            _ctable[slot].method = method
            _ctable[slot].owner = owner
            _ctable[slot].iid = iid
            _ctable_used += 1
        self._push(_ctable[slot].iid)
        return 0

    cdef int _on_exception_raised(self, tuple info) except -1:
        # One instant per exception, in the frame that raised it: as it reaches the callers,
        # each adds itself to the traceback (a bare `raise` in a handler adds one too).
        cdef object tb = info[2]
        if self.depth == 0 or (tb is not None and tb.tb_next is not None):
            return 0
        if self.stack[self.depth - 1].state == EMITTED:
            self._emit(INSTANT, self.engine.intern_exception(info[0]), ptr_now_ns())
        return 0

    cdef int _on_exception(self) except -1:
        # Without the trace function, one instant marks where an exception started
        # unwinding (the frames it then leaves are the same propagation).
        if not self.unwinding:
            self.unwinding = True
            if self.exception_iid and not self.typed_exceptions and self.depth > 0:
                if self.stack[self.depth - 1].state == EMITTED:
                    self._emit(INSTANT, self.exception_iid, ptr_now_ns())
        return 0

    # ---- events from Python (GC, exceptions seen elsewhere) ---------------------------------

    def call(self, frame):
        """Records the call of `frame` (its first event reached another hook)."""
        cdef uint32_t iid = self._code_iid(<PyFrameObject*><PyObject*>frame)
        if iid == OWN:
            self.own_depth += 1
            self._push_hidden(OWN)
        else:
            self._push(iid)

    def begin(self, uint32_t iid):
        """Opens a slice named by interned `iid` on this thread; False if it cannot now.

        Such slices (GC runs) are written at once, outside the call stack: the tracer's own
        frame that opens one returns before it ends.
        """
        if self.in_hook or not self.active:
            return False
        cdef uint64_t now = ptr_now_ns()
        self._emit_pending()
        self._emit(SLICE_BEGIN, iid, now)
        return True

    def end(self):
        """Closes the slice `begin` opened."""
        if not self.in_hook:
            self._emit(SLICE_END, 0, ptr_now_ns())

    def instant(self, uint32_t iid):
        """An instant event named by interned `iid`."""
        if not self.in_hook and self.active:
            self._emit(INSTANT, iid, ptr_now_ns())


def uninstall_all_threads():
    """Removes the profile hook from every thread of the interpreter."""
    ptr_clear_all_threads(_trace)


def split_packets(bytes batch):
    """The packets of a batch (framed as a Trace), each without its `Trace.packet` framing."""
    cdef const unsigned char* p = <const unsigned char*><char*>batch
    cdef const unsigned char[::1] view = batch
    cdef Py_ssize_t pos = 0, end = len(batch), size
    cdef list packets = []
    while pos < end:
        if p[pos + 1] < 0x80:  # after the Trace.packet tag, a 1-byte size
            size = p[pos + 1]
            pos += 2
        else:
            size, pos = read_varint(view, pos + 1, end)
        packets.append(batch[pos:pos + size])
        pos += size
    return packets


def now_ns():
    """CLOCK_BOOTTIME in nanoseconds (the clock every timestamp uses)."""
    return ptr_now_ns()
