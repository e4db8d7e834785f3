# cython: language_level=3, binding=False, boundscheck=False, wraparound=False
# cython: initializedcheck=False, annotation_typing=False
"""The recorder on `sys.monitoring` (Python 3.12+): the one recorder, fed by its callbacks.

This module is `_hook.pyx` (included: the names of code objects and builtins, the module's
functions) plus `MonitoringRecorder` (`_thread_recorder`'s recorder), whose `install` registers
compiled callbacks for one `sys.monitoring` tool: PY_START / PY_RESUME / PY_THROW open a slice, PY_RETURN / PY_YIELD /
PY_UNWIND close it (a generator's slice ends at each yield and begins again at each resume),
CALL / C_RETURN / C_RAISE time builtin calls, RAISE names each exception's type where it is
raised. Code that is not recorded (--include/--exclude, the tracer's runner) answers DISABLE
at its code locations, so CPython stops calling back for it, and so does a call site whose
callee is not a builtin (a Python function: its PY_START follows). Events are process-wide: each
callback finds the calling thread's recorder by the thread state's unique id.
`_recorder.py` picks this module on 3.12+.
"""

include "_hook.pyx"

cdef extern from *:
    """
    static inline uint64_t ptr_thread_id(void) { return PyThreadState_Get()->id; }
    /* The calling thread's recorder while ptr_tls_epoch is the module's epoch (initial-exec:
       a read relative to the thread pointer, no __tls_get_addr call). */
    static __thread uint64_t ptr_tls_epoch __attribute__((tls_model("initial-exec")));
    static __thread PyObject* ptr_tls_recorder __attribute__((tls_model("initial-exec")));
    static inline int ptr_is_method_descr(PyObject* o) {
        return Py_IS_TYPE(o, &PyMethodDescr_Type);
    }
    static inline void* ptr_descr_method(PyObject* o) {
        return (void*)((PyMethodDescrObject*)o)->d_method;
    }
    static inline PyObject* ptr_new_ref(PyObject* o) { Py_INCREF(o); return o; }
    typedef int (*ptr_event_fn)(PyObject*, int, PyObject**);
    static inline int ptr_call_event(ptr_event_fn f, PyObject* r, int what, PyObject** args) {
        return f(r, what, args);
    }
    """
    uint64_t ptr_thread_id()
    uint64_t ptr_tls_epoch
    PyObject* ptr_tls_recorder
    int ptr_is_method_descr(PyObject* o)
    void* ptr_descr_method(PyObject* o)
    PyObject* ptr_new_ref(PyObject* o)
    ctypedef int (*ptr_event_fn)(PyObject*, int, PyObject**) noexcept
    int ptr_call_event(ptr_event_fn f, PyObject* r, int what, PyObject** args) noexcept
    PyFrameObject* PyEval_GetFrame()
    void Py_INCREF(PyObject*)

from perfetto_client._vectorcall cimport pc_use_vectorcall

ctypedef PyObject* (*ptr_vectorcall)(PyObject*, PyObject**, size_t, PyObject*) noexcept

import sys

from perfetto_client._errors import TracingError

# The events, grouped by what they do to the stack.
cdef enum:
    START = 0     # PY_START, PY_RESUME: a frame runs (DISABLE-able)
    THROW = 1     # PY_THROW: a generator resumes with an exception
    RETURN = 2    # PY_RETURN, PY_YIELD: a frame stops running (DISABLE-able)
    UNWIND = 3    # PY_UNWIND: a frame is left by an exception
    C_CALL = 4    # CALL
    C_END = 5     # C_RETURN, C_RAISE
    RAISED = 6    # RAISE

cdef object _DISABLE = None
cdef object _MISSING = None
cdef int _tool = -1
cdef list _registered = []  # the events given a callback

# Thread state id -> recorder (a strong reference), open addressing; 0 marks a free slot.
ctypedef struct ThreadSlot:
    uint64_t id
    PyObject* recorder

cdef ThreadSlot* _threads = NULL
cdef Py_ssize_t _threads_cap = 0
cdef Py_ssize_t _threads_used = 0
cdef uint64_t _epoch = 1  # a new epoch forgets every thread's cached recorder
cdef uint64_t _callbacks = 0


def callbacks():
    """How many events CPython has delivered to this module's callbacks (in this process)."""
    return _callbacks


cdef inline Py_ssize_t _thread_slot(uint64_t tid) noexcept:
    cdef Py_ssize_t i = <Py_ssize_t>((tid * 0x9E3779B97F4A7C15u) >> 40) & (_threads_cap - 1)
    while _threads[i].id != 0 and _threads[i].id != tid:
        i = (i + 1) & (_threads_cap - 1)
    return i


cdef inline PyObject* _current() noexcept:
    # The calling thread's recorder (borrowed), NULL if it has none.
    global ptr_tls_epoch, ptr_tls_recorder
    if ptr_tls_epoch != _epoch:
        ptr_tls_epoch = _epoch
        ptr_tls_recorder = _threads[_thread_slot(ptr_thread_id())].recorder if _threads_cap else NULL
    return ptr_tls_recorder


cdef int _set_current(object recorder) except -1:
    global _threads, _threads_cap, _threads_used, ptr_tls_epoch, ptr_tls_recorder
    cdef ThreadSlot* old = _threads
    cdef Py_ssize_t old_cap = _threads_cap, i, j
    if 2 * (_threads_used + 1) > _threads_cap:
        _threads_cap = max(64, 2 * old_cap)
        _threads = <ThreadSlot*>malloc(_threads_cap * sizeof(ThreadSlot))
        if _threads == NULL:
            _threads, _threads_cap = old, old_cap
            raise MemoryError()
        memset(_threads, 0, _threads_cap * sizeof(ThreadSlot))
        for i in range(old_cap):
            if old[i].id != 0:
                j = _thread_slot(old[i].id)
                _threads[j] = old[i]
        free(old)
    i = _thread_slot(ptr_thread_id())
    if _threads[i].id == 0:
        _threads_used += 1
    else:
        Py_DECREF(_threads[i].recorder)
    Py_INCREF(<PyObject*>recorder)
    _threads[i].id = ptr_thread_id()
    _threads[i].recorder = <PyObject*>recorder
    ptr_tls_epoch, ptr_tls_recorder = _epoch, <PyObject*>recorder
    return 0


cdef void _forget_threads() noexcept:
    global _threads, _threads_cap, _threads_used, _epoch
    cdef ThreadSlot* table = _threads
    cdef Py_ssize_t i, cap = _threads_cap
    _threads, _threads_cap, _threads_used = NULL, 0, 0
    _epoch += 1
    for i in range(cap):
        if table[i].id != 0:
            Py_DECREF(table[i].recorder)
    free(table)


cdef int _run_event(PyObject* recorder, int what, PyObject** args) except -1:
    return (<MonitoringRecorder>recorder)._on_event(what, args)


cdef int _raised() except -1:
    return -1  # the exception _run_event raised is still set


cdef void _event_failed(MonitoringRecorder r) noexcept:
    try:
        _raised()
    except Exception:
        r.active = False
        r.failed = True
    except BaseException as exc:
        # As in the profile hook: a signal handler raised outside a batch write.
        r.active = False
        r.interrupted = exc


cdef PyObject* _event(int what, PyObject** args) noexcept:
    # Every callback: the calling thread's recorder takes the event as the profile hook does.
    global _callbacks
    cdef PyObject* p = _current()
    cdef MonitoringRecorder r
    cdef int result = 0
    _callbacks += 1
    if p == NULL:
        return ptr_new_ref(<PyObject*>None)
    r = <MonitoringRecorder>p
    if r.active and not r.in_hook:
        r.in_hook = True
        # Called as a C function that cannot fail: a try block here would save and restore
        # the handled exception on every event; an error (-1) is taken by _event_failed.
        result = ptr_call_event(<ptr_event_fn>_run_event, p, what, args)
        if result < 0:
            _event_failed(r)
            result = 0
        r.in_hook = False
    # What a signal handler raised reaches the program where a frame begins (the frame is
    # then left by PY_UNWIND, as any frame an exception leaves) or a call is made.
    if r.interrupted is not None and (what == START or (what == C_CALL and not r.active)):
        _deliver(r)
        return NULL
    return ptr_new_ref(<PyObject*>(_DISABLE if result else None))


cdef inline PyObject* _taken() noexcept:
    # The answer to an event a fast path took (what _event answers it).
    global _callbacks
    _callbacks += 1
    return ptr_new_ref(<PyObject*>None)


cdef PyObject* _on_start(
    PyObject* m, PyObject** args, size_t nargsf, PyObject* kwnames
) noexcept:
    cdef PyObject* p = _current()
    if p != NULL and (<MonitoringRecorder>p)._begin_fast(_cached_iid(args[0]), <uintptr_t>args[0]):
        return _taken()
    return _event(START, args)


cdef PyObject* _on_throw(
    PyObject* m, PyObject** args, size_t nargsf, PyObject* kwnames
) noexcept:
    return _event(THROW, args)


cdef inline bint _recorded_caller(MonitoringRecorder r, PyObject* code) noexcept:
    # `code` (calling a builtin) is recorded: the innermost entry was opened by a fast path
    # for it (its own start, or a builtin it called), or it has a name.
    return (
        r.depth != 0 and r.entry_code[r.depth - 1] == <uintptr_t>code
    ) or _cached_iid(code) != 0


cdef PyObject* _on_return(
    PyObject* m, PyObject** args, size_t nargsf, PyObject* kwnames
) noexcept:
    # A return ends the innermost entry when a fast path opened it for this code: then it
    # needs no lookup (the general path ends the innermost entry of any recorded code).
    cdef PyObject* p = _current()
    cdef MonitoringRecorder r
    if p != NULL:
        r = <MonitoringRecorder>p
        if r._end_fast(<uintptr_t>args[0]):
            r.unwinding = False
            return _taken()
    return _event(RETURN, args)


cdef PyObject* _on_unwind(
    PyObject* m, PyObject** args, size_t nargsf, PyObject* kwnames
) noexcept:
    return _event(UNWIND, args)


cdef PyObject* _on_call(
    PyObject* m, PyObject** args, size_t nargsf, PyObject* kwnames
) noexcept:
    # Most calls are of Python functions (PY_START follows): their call site answers DISABLE
    # here, at once, and then costs nothing.
    global _callbacks
    cdef PyObject* p
    cdef void* method
    cdef void* owner
    if not ptr_is_cfunction(args[2]) and not ptr_is_method_descr(args[2]):
        _callbacks += 1
        return ptr_new_ref(<PyObject*>_DISABLE)
    p = _current()
    if p != NULL and _recorded_caller(<MonitoringRecorder>p, args[0]):
        _c_key_of(args[2], args[3], &method, &owner)
        if (<MonitoringRecorder>p)._begin_fast(_cached_c_iid(method, owner), <uintptr_t>args[0]):
            return _taken()
    return _event(C_CALL, args)


cdef PyObject* _on_c_end(
    PyObject* m, PyObject** args, size_t nargsf, PyObject* kwnames
) noexcept:
    cdef PyObject* p
    if not ptr_is_cfunction(args[2]) and not ptr_is_method_descr(args[2]):
        return ptr_new_ref(<PyObject*>None)  # a class, or another callable that is not a builtin
    p = _current()
    if p != NULL and (<MonitoringRecorder>p)._end_fast(<uintptr_t>args[0]):
        return _taken()
    return _event(C_END, args)


cdef PyObject* _on_raise(
    PyObject* m, PyObject** args, size_t nargsf, PyObject* kwnames
) noexcept:
    return _event(RAISED, args)


cdef inline void _c_key_of(PyObject* func, PyObject* arg0, void** method, void** owner) noexcept:
    # The table's key of a builtin function, or of a method descriptor bound to `arg0`: the
    # profile hook's key of the bound builtin it is given.
    if ptr_is_cfunction(func):
        _c_key(func, method, owner)
    else:
        method[0] = ptr_descr_method(func)
        owner[0] = NULL if arg0 == <PyObject*>_MISSING else ptr_type_of(arg0)


cdef class _Callback:
    """A `sys.monitoring` callback: CPython's calls go straight to its C function `call` (a
    builtin function object would add a trampoline to every event)."""

    cdef ptr_vectorcall call
    cdef str name

    def __repr__(self):
        return f"<perfetto-trace {self.name} callback>"


cdef _Callback _callback(str name, ptr_vectorcall call):
    cdef _Callback callback = _Callback()
    callback.name = name
    callback.call = call
    pc_use_vectorcall(_Callback, <char*>&callback.call - <char*><void*>callback)
    return callback


cdef int _start_monitoring(object options) except -1:
    # Takes a free tool id (the profiler's if free), registers the callbacks, turns events on.
    global _tool, _DISABLE, _MISSING
    monitoring = sys.monitoring
    _DISABLE, _MISSING = monitoring.DISABLE, monitoring.MISSING
    ids = [monitoring.PROFILER_ID] + [i for i in range(6) if i != monitoring.PROFILER_ID]
    for tool in ids:
        if monitoring.get_tool(tool) is None:
            break
    else:
        raise TracingError("sys.monitoring has no free tool id: the program is not recorded")
    monitoring.use_tool_id(tool, "perfetto-trace")
    _tool = tool
    E = monitoring.events
    start = _callback("py_start", _on_start)
    end = _callback("py_return", _on_return)
    callbacks = [
        (E.PY_START, start),
        (E.PY_RESUME, start),
        (E.PY_THROW, _callback("py_throw", _on_throw)),
        (E.PY_RETURN, end),
        (E.PY_YIELD, end),
        (E.PY_UNWIND, _callback("py_unwind", _on_unwind)),
    ]
    if options.c_calls:
        c_end = _callback("c_return", _on_c_end)
        callbacks.append((E.CALL, _callback("call", _on_call)))
        callbacks.append((E.C_RETURN, c_end))
        callbacks.append((E.C_RAISE, c_end))
    if options.exceptions:
        callbacks.append((E.RAISE, _callback("raise", _on_raise)))
    wanted = 0
    for event, callback in callbacks:
        monitoring.register_callback(tool, event, callback)
        _registered.append(event)
        wanted |= event
    # Locations an earlier recording disabled may be recorded by this one.
    monitoring.restart_events()
    monitoring.set_events(tool, wanted)
    return 0


def uninstall():
    """Stops the events, releases the tool id and forgets every thread's recorder."""
    global _tool
    uninstall_all_threads()  # the new-thread profile hooks still waiting on their first event
    if _tool >= 0:
        monitoring = sys.monitoring
        monitoring.set_events(_tool, 0)
        for event in _registered:
            monitoring.register_callback(_tool, event, None)
        _registered.clear()
        monitoring.free_tool_id(_tool)
        _tool = -1
    _forget_threads()


cdef class MonitoringRecorder(ThreadRecorder):
    """Records one thread's calls, fed by `sys.monitoring` events."""

    def install(self, Py_ssize_t own_frames=0, bint from_profile_hook=False):
        """Makes this recorder the calling thread's; the first one starts the events.

        `own_frames` of the tracer's frames are running and will return before the program's
        next event; nothing is recorded until they have.
        """
        self.own_depth = own_frames
        # RAISE gives each exception where it is raised: its type costs nothing more.
        self.typed_exceptions = self.exception_iid != 0
        if from_profile_hook:
            PyEval_SetProfile(NULL, NULL)  # the engine's new-thread hook has done its part
        if _tool < 0:
            _start_monitoring(self.engine.options)
        _set_current(self)

    def call(self, frame):
        """Nothing: the frame whose call reached the new-thread hook starts with PY_START."""

    cdef uint32_t _code_iid(self, object where) except? 0xFFFFFFFE:
        # `where` is the code object an event names (its frame is the running one).
        return _name_code(self, <PyObject*>where, <object><PyObject*>PyEval_GetFrame())

    cdef uint32_t _c_function_iid(self, object func, object arg0) except? 0xFFFFFFFE:
        # A builtin function, or a method descriptor bound to `arg0`.
        cdef void* method
        cdef void* owner
        cdef Py_ssize_t slot
        _c_key_of(<PyObject*>func, <PyObject*>arg0, &method, &owner)
        slot = _cslot(method, owner)
        if _ctable[slot].method != NULL:
            return _ctable[slot].iid
        bound = func
        if not ptr_is_cfunction(<PyObject*>func) and owner != NULL:
            bound = func.__get__(arg0, type(arg0))
        return _c_table_put(method, owner, self.engine.intern_c_function(bound))

    cdef int _on_event(self, int what, PyObject** args) except -1:
        # 1: DISABLE this code location. Code not recorded (iid 0) never enters the stack.
        cdef uint32_t iid
        cdef PyObject* func
        if what == START or what == THROW:
            iid = self._code_iid(<object>args[0])
            if iid == 0:
                return 1 if what == START else 0
            self._enter(iid)
        elif what == RETURN or what == UNWIND:
            if self._code_iid(<object>args[0]) == 0:
                return 1 if what == RETURN else 0
            self._leave(<object>args[0], what == UNWIND)
        elif what == C_CALL or what == C_END:
            # Builtin functions and methods, as the profile hook sees them; other callables
            # (Python functions, classes) are not C calls.
            func = args[2]
            if self._code_iid(<object>args[0]) == 0:
                return 1 if what == C_CALL else 0  # called by code that is not recorded
            if not ptr_is_cfunction(func) and not ptr_is_method_descr(func):
                return 0
            if what == C_END:
                self._c_leave()
            else:
                self._c_enter(<object>args[0], <object>func, <object>args[3])
        elif what == RAISED:
            exc = <object>args[2]
            self._on_exception_raised(type(exc), exc.__traceback__)
        return 0
