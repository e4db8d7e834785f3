import cython

from cpython.ref cimport PyObject

from perfetto_client._categories cimport Category
from perfetto_client._track_event cimport describe_track, now, thread_writers, write_event
from perfetto_client._track_event_writer cimport TrackEventWriter
from perfetto_client._tracks cimport Track

cdef dict _counter_tracks



cdef class Slice:
    cdef object _args
    cdef Category _cat
    cdef Py_ssize_t _key
    cdef object _track
    cdef bytes _extra
    cdef list _iids
    cdef tuple _writers


@cython.locals(key=object, out=Slice, keys=dict)
cpdef Slice thread_slice(Category cat, object name, dict args)
@cython.locals(key=object, extra=bytes, iids=list, encoded=bytes, keys=dict)
cpdef Slice track_slice(Category cat, object name, Track track, dict args)
cdef object _NO_SLICE
cdef dict _modules
cdef object _running_loop_getter
cdef dict _current_tasks
cdef bint _TASKS_MAPPED
cdef bint _find_asyncio() except -1
cdef bint _task_may_be_current() except -1


cdef class InstantFunction:
    cdef void *_vectorcall
    cdef dict __dict__
    cdef object _fn


@cython.locals(keys=dict, writers=tuple, writer=TrackEventWriter, ts="long long", on=Track)
cdef _put_instant(Category cat, object name, object track, object timestamp)
@cython.locals(cat=Category)
cdef object _instant_vectorcall(InstantFunction self, PyObject **args, size_t nargsf, PyObject *kwnames)
