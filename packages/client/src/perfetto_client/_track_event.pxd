import cython

from perfetto_client._categories cimport Category, CategoryRegistry
from perfetto_client._track_event_writer cimport TrackEventWriter
from perfetto_client._tracks cimport Track

cdef object _clock
cdef CategoryRegistry registry
cdef int _posix_clock

@cython.locals(ns="long long")
cpdef long long now() except? -1
cdef class ThreadState:
    cdef public object pid
    cdef public long long generation
    cdef public dict writers
    cdef public dict by_mask
    cdef public object last_mask
    cdef public tuple last_writers
    cdef public object track


@cython.locals(cached="void *", state=ThreadState)
cdef ThreadState _current_state()
@cython.locals(state=ThreadState)
cpdef ThreadState thread_state()
@cython.locals(state=ThreadState, writers=tuple)
cpdef tuple thread_writers(object mask)
@cython.locals(writers=tuple, writer=TrackEventWriter, ts="long long")
cpdef tuple slice_enter(Category cat, Py_ssize_t key)
@cython.locals(writer=TrackEventWriter, ts="long long")
cpdef slice_exit(tuple writers)
@cython.locals(writer=TrackEventWriter, interned=bytes)
cpdef write_event(tuple writers, Py_ssize_t key, int event_type, long long ts, object track, bytes extra, list iids)
cdef describe_track(TrackEventWriter writer, object track, long long ts)
