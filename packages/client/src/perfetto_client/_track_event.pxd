import cython

from cpython.ref cimport PyObject

from perfetto_client._track_event_writer cimport TrackEventWriter
from perfetto_client._tracks cimport Track

cdef object _clock
cdef int _posix_clock

@cython.locals(ns="long long")
cpdef long long now() except? -1
cdef class ThreadState:
    cdef public object pid
    cdef public long long generation
    cdef public dict writers
    cdef public dict by_mask
    cdef public object track


@cython.locals(cached="void *", state=ThreadState)
cdef ThreadState _current_state()
@cython.locals(state=ThreadState)
cpdef ThreadState thread_state()
@cython.locals(state=ThreadState, writers=tuple)
cpdef tuple thread_writers(object mask)
@cython.locals(writers=tuple, writer=TrackEventWriter, ts="long long")
cpdef tuple slice_enter(object cat, Py_ssize_t key)
@cython.locals(writer=TrackEventWriter, ts="long long")
cpdef slice_exit(tuple writers)
@cython.locals(writer=TrackEventWriter, interned=bytes)
cpdef write_event(tuple writers, Py_ssize_t key, int event_type, long long ts, object track, bytes extra, list iids)
cdef dict _counter_tracks



cdef class Slice:
    cdef object _args
    cdef object _cat
    cdef Py_ssize_t _key
    cdef object _track
    cdef bytes _extra
    cdef list _iids
    cdef tuple _writers


@cython.locals(key=object, out=Slice, keys=dict)
cpdef Slice thread_slice(object cat, object name, dict args)
@cython.locals(key=object, extra=bytes, iids=list, encoded=bytes, keys=dict)
cpdef Slice track_slice(object cat, object name, Track track, dict args)
cdef _describe(TrackEventWriter writer, object track, long long ts)
cdef object _NO_SLICE
cdef dict _modules
cdef object _running_loop_getter
cdef bint _in_running_loop() except -1



cdef class TracedFunction:
    cdef void *_vectorcall
    cdef dict __dict__
    cdef object __weakref__
    cdef object _fn
    cdef object _cat
    cdef Py_ssize_t _key


@cython.locals(writers=tuple)
cdef object _traced_vectorcall(TracedFunction self, PyObject **args, size_t nargsf, PyObject *kwnames)
