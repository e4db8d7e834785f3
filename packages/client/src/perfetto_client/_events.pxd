import cython

from cpython.ref cimport PyObject

from perfetto_client._track_event cimport describe_track, now, thread_writers, write_event
from perfetto_client._track_event_writer cimport TrackEventWriter
from perfetto_client._tracks cimport Track

@cython.locals(writers=tuple, writer=TrackEventWriter, ts="long long")
cpdef tuple slice_enter(object cat, Py_ssize_t key)
@cython.locals(writer=TrackEventWriter, ts="long long")
cpdef slice_exit(tuple writers)
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
