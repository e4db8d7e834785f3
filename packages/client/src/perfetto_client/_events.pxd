import cython

from cpython.ref cimport PyObject

from perfetto_client._categories cimport Category
from perfetto_client._debug_annotations cimport encode_annotations, put_annotated_event
from perfetto_client._track_event cimport describe_track, now, thread_writers, write_event
from perfetto_client._track_event_writer cimport TrackEventWriter
from perfetto_client._tracks cimport Track
from perfetto_client._vectorcall_function cimport VectorcallFunction

cdef dict _counter_tracks



cdef class Slice:
    cdef Category _cat
    cdef Py_ssize_t _key
    cdef object _track
    cdef bytes _extra
    cdef list _iids
    cdef object _names
    cdef tuple _values
    cdef tuple _writers


cdef list _NO_IIDS
cpdef Slice thread_slice(Category cat, object name, dict args)
@cython.locals(key=object, out=Slice, keys=dict)
cdef Slice _thread_slice(Category cat, object name, object names, tuple values)
@cython.locals(key=object, extra=bytes, iids=list, encoded=bytes, keys=dict)
cpdef Slice track_slice(Category cat, object name, Track track, dict args)
cdef object _NO_SLICE


cdef class TraceEventFunction(VectorcallFunction):
    pass


cdef frozenset _OPTIONS
@cython.locals(cat=Category, names=tuple, nargs=Py_ssize_t)
cdef object _trace_event_vectorcall(TraceEventFunction self, PyObject **args, size_t nargsf, PyObject *kwnames)
cdef dict _modules
cdef object _running_loop_getter
cdef dict _current_tasks
cdef bint _TASKS_MAPPED
cdef bint _find_asyncio() except -1
cdef bint _task_may_be_current() except -1


cdef class InstantFunction(VectorcallFunction):
    pass


@cython.locals(keys=dict, writers=tuple, writer=TrackEventWriter, ts="long long", on=Track)
cdef _put_instant(Category cat, object name, object track, object timestamp)
@cython.locals(cat=Category)
cdef object _instant_vectorcall(InstantFunction self, PyObject **args, size_t nargsf, PyObject *kwnames)


cdef class CounterFunction(VectorcallFunction):
    pass


@cython.locals(writers=tuple, ts="long long", field=bytes, writer=TrackEventWriter, on=Track)
cdef _put_counter(Category cat, object track, object value, object timestamp)
@cython.locals(cat=Category)
cdef object _counter_vectorcall(CounterFunction self, PyObject **args, size_t nargsf, PyObject *kwnames)
