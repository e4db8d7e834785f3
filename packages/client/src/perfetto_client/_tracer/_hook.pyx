# cython: language_level=3, binding=False, boundscheck=False, wraparound=False
# cython: initializedcheck=False, annotation_typing=False
"""The 3.11 profile hook: the C callback that feeds a thread's recorder its events.

A `ProfileRecorder` (the one recorder, `_thread_recorder`, naming code objects through their
code-extra slot and builtins through a C hash table) is installed with `PyEval_SetProfile` on
its own thread: the recorder is the hook's argument, so the hook needs no thread-local lookup.
The common call and return go to the recorder's fast path; every other event to its general
one. `_monitor.pyx` includes this file for these names and the builtins' table. The pure build's
hook is `_hook_pure.py`.
"""

from cpython.exc cimport PyErr_SetObject
from cpython.object cimport PyObject
from libc.stdint cimport uint32_t, uint64_t, uintptr_t
from libc.stdlib cimport free, malloc
from libc.string cimport memset

from perfetto_client._tracer._packet_batch cimport now_ns as ptr_now_ns
from perfetto_client._tracer._thread_recorder cimport ThreadRecorder
from protozero._varint cimport read_varint

cdef extern from *:
    """
    #include <frameobject.h>
    typedef int (*ptr_tracefunc)(PyObject*, PyFrameObject*, int, PyObject*);
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


cdef uint32_t _name_code(ThreadRecorder r, PyObject* code, object frame) except? 0xFFFFFFFE:
    # The iid of `code` (running in `frame`), asked of the engine once per recording.
    cdef void* extra = NULL
    cdef uintptr_t v
    cdef uint32_t iid
    ptr_code_get_extra(code, _code_index, &extra)
    v = <uintptr_t>extra
    if (v >> 32) == _generation:
        return <uint32_t>(v & 0xFFFFFFFFu)
    iid = r.engine.intern_code(<object>code, frame)
    ptr_code_set_extra(code, _code_index, <void*>((_generation << 32) | iid))
    return iid


cdef uint32_t _c_table_put(void* method, void* owner, uint32_t iid) except? 0xFFFFFFFE:
    # Remembers `iid`, the builtin keyed (method, owner)'s (not in the table); returns it.
    global _ctable_used
    cdef Py_ssize_t slot
    if 2 * (_ctable_used + 1) > _ctable_cap:
        _cgrow()
    slot = _cslot(method, owner)
    _ctable[slot].method = method
    _ctable[slot].owner = owner
    _ctable[slot].iid = iid
    _ctable_used += 1
    return iid


cdef int _deliver(ThreadRecorder r) noexcept:
    # Raises `r.interrupted` from the hook (returns -1 with it set) without our frames.
    exc, r.interrupted = r.interrupted, None
    PyErr_SetObject(type(exc), exc.with_traceback(None))
    return -1


cdef int _hook(PyObject* obj, PyFrameObject* frame, int what, PyObject* arg) noexcept:
    cdef ProfileRecorder r = <ProfileRecorder>obj
    cdef PyObject* code
    cdef void* method
    cdef void* owner
    if not r.active:
        return _deliver(r) if r.interrupted is not None else 0
    # The common events first, without the try block below (it saves the handled exception).
    if what == PyTrace_CALL:
        code = ptr_frame_code(frame)
        Py_DECREF(code)  # the frame keeps it alive
        if r._begin_fast(_cached_iid(code), 0):
            return 0
    elif what == PyTrace_RETURN:
        if arg != NULL and r._end_fast(0):
            r.unwinding = False
            return 0
    elif what == PyTrace_C_CALL:
        if r.c_calls and r.depth and r.entry_iid[r.depth - 1] != 0:
            _c_key(arg, &method, &owner)
            if r._begin_fast(_cached_c_iid(method, owner), 0):
                return 0
    elif what == PyTrace_C_RETURN or what == PyTrace_C_EXCEPTION:
        if r.c_calls and r._end_fast(0):
            return 0
    r.in_hook = True
    try:
        if what == PyTrace_CALL:
            r._enter(r._code_iid(<object>frame))
        elif what == PyTrace_RETURN:
            r._leave(<object>frame, arg == NULL)
        elif what == PyTrace_C_CALL:
            if r.c_calls:
                r._c_enter(<object>frame, <object>arg, None)
        elif what == PyTrace_C_RETURN or what == PyTrace_C_EXCEPTION:
            if r.c_calls:
                r._c_leave()
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
        return _deliver(r)
    return 0


cdef int _trace(PyObject* obj, PyFrameObject* frame, int what, PyObject* arg) noexcept:
    # The trace function is there for PyTrace_EXCEPTION only (3.11's profile hook never sees
    # the exception): line events are turned off in every frame it is called for.
    cdef ProfileRecorder r
    if what == PyTrace_CALL:
        ptr_no_line_events(frame)
    elif what == PyTrace_EXCEPTION:
        r = <ProfileRecorder>obj
        if r.active and not r.in_hook:
            r.in_hook = True
            try:
                info = <tuple>arg
                r._on_exception_raised(info[0], info[2])
            except Exception:
                r.active = False
                r.failed = True
            except BaseException as exc:
                r.active = False  # as in _hook; the profile hook delivers it
                r.interrupted = exc
            r.in_hook = False
    return 0


cdef class ProfileRecorder(ThreadRecorder):
    """Records one thread's calls, fed by the C profile hook."""

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

    cdef uint32_t _code_iid(self, object where) except? 0xFFFFFFFE:
        # `where` is a frame, which keeps its code object alive: the new reference is dropped.
        cdef PyObject* code = ptr_frame_code(<PyFrameObject*>where)
        Py_DECREF(code)
        return _name_code(self, code, where)

    cdef uint32_t _c_function_iid(self, object func, object arg0) except? 0xFFFFFFFE:
        cdef void* method
        cdef void* owner
        cdef Py_ssize_t slot
        _c_key(<PyObject*>func, &method, &owner)
        slot = _cslot(method, owner)
        if _ctable[slot].method != NULL:
            return _ctable[slot].iid
        return _c_table_put(method, owner, self.engine.intern_c_function(func))


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
