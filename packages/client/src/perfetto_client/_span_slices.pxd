import cython

from perfetto_client._categories cimport Category
from perfetto_client._debug_annotations cimport encode_annotations
from perfetto_client._events cimport _task_may_be_current
from perfetto_client._track_event cimport now, thread_state, thread_writers, write_event
from perfetto_client._tracks cimport Track

cdef bytes _FLOW_ID
cdef list _NO_IIDS
cdef dict _spans_tracks
cdef dict _open
cdef bint _told

@cython.locals(task=object, thread=Track, found=tuple, track=Track)
cdef tuple _spans_track()
cdef object _span_id(object span)
cdef str _name(object span)
cdef bint _has(object span, str field) except -1
cdef tuple _status(object span)
@cython.locals(category=Category, writers=tuple, ts="long long", track=Track, extra=bytes, end_fields=bytes)
cpdef begin_span(object span)
@cython.locals(state=tuple, track=Track, category=Category, writers=tuple, ts="long long", begin_ts="long long", args=dict, extra=bytes, iids=list, encoded=bytes)
cpdef end_span(object span, object error)
cdef dict _attributes(object span)
@cython.locals(offset="long long", ts="long long", extra=bytes, iids=list, encoded=bytes)
cdef _write_events(tuple writers, object span, Track track, long long begin, long long end)
