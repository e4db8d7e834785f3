import cython
from libc.stdint cimport uint32_t, uint64_t

from perfetto_client._tracer._packet_batch cimport (
    PacketBatch,
    now_ns,
    write_event,
    write_interned_event,
)
from perfetto_protos.tags.fields_c cimport (
    TrackEvent_Type_TYPE_INSTANT,
    TrackEvent_Type_TYPE_SLICE_BEGIN,
    TrackEvent_Type_TYPE_SLICE_END,
)

cdef uint32_t OWN
cdef unsigned char NOT_RECORDED, PENDING, EMITTED, HIDDEN
cdef uint32_t _LOCATION
cdef uint32_t _BATCH_MASK


cdef class ThreadRecorder:
    cdef PacketBatch batch
    cdef Py_ssize_t batch_size
    cdef uint32_t batch_no
    cdef object engine
    cdef list blobs
    cdef bytearray locations
    # The stack: one entry per frame or builtin running (index < depth), in parallel arrays.
    cdef object _ts_array, _iid_array, _state_array, _code_array
    cdef unsigned long long[::1] entry_ts
    cdef unsigned int[::1] entry_iid
    cdef unsigned char[::1] entry_state
    cdef unsigned long long[::1] entry_code
    cdef Py_ssize_t depth
    cdef Py_ssize_t stack_cap
    cdef Py_ssize_t recorded_depth
    cdef Py_ssize_t first_pending
    cdef object _seen_array
    cdef unsigned int[::1] seen
    cdef Py_ssize_t seen_cap
    cdef Py_ssize_t max_depth
    cdef uint64_t min_duration_ns
    cdef bint unwinding
    cdef Py_ssize_t own_depth
    cdef uint32_t exception_iid
    cdef bint typed_exceptions
    cdef public bint in_hook
    cdef public bint flush_soon
    cdef public bint active
    cdef public bint failed
    cdef public object interrupted
    cdef public bint c_calls
    cdef public unsigned long events
    cdef public object sequence_id

    @cython.locals(prologue=bytes)
    cdef int _start_batch(self, uint64_t ts) except -1
    @cython.locals(data=bytes)
    cdef int _hand_off(self, uint64_t ts) except -1
    cdef inline int _write(self, int kind, uint32_t iid, uint64_t ts, bint location) except -1
    @cython.locals(seen=uint32_t)
    cdef int _emit(self, int kind, uint32_t iid, uint64_t ts) except -1
    @cython.locals(blob=bytes, location=bint)
    cdef int _emit_interned(self, int kind, uint32_t iid, uint64_t ts) except -1
    @cython.locals(cap=Py_ssize_t)
    cdef int _grow_seen(self, uint32_t iid) except -1
    @cython.locals(cap=Py_ssize_t)
    cdef int _grow_stack(self) except -1

    cdef inline bint _plain(self) noexcept
    @cython.locals(seen=uint32_t, ts=uint64_t, d=Py_ssize_t)
    cdef bint _begin_fast(self, uint32_t iid, unsigned long long code) noexcept
    @cython.locals(top=Py_ssize_t)
    cdef bint _end_fast(self, unsigned long long code) noexcept

    @cython.locals(d=Py_ssize_t)
    cdef inline int _push_hidden(self, uint32_t iid) except -1
    @cython.locals(ts=uint64_t, d=Py_ssize_t)
    cdef int _push(self, uint32_t iid) except -1
    @cython.locals(state="unsigned char", ts=uint64_t, iid=uint32_t)
    cdef int _pop(self, uint64_t now) except -1
    @cython.locals(i=Py_ssize_t)
    cdef int _emit_pending(self) except -1

    cdef int _enter(self, uint32_t iid) except -1
    cdef int _leave(self, object where, bint unwound) except -1
    @cython.locals(caller=uint32_t)
    cdef int _c_enter(self, object where, object func, object arg0) except -1
    cdef int _c_leave(self) except -1
    cdef int _on_exception_raised(self, object exc_type, object tb) except -1
    cdef int _on_exception(self) except -1
    cdef uint32_t _code_iid(self, object where) except? 0xFFFFFFFE
    cdef uint32_t _c_function_iid(self, object func, object arg0) except? 0xFFFFFFFE
