import cython

from perfetto_client._track_event_writer cimport TrackEventWriter


cdef dict _name_fields

cdef bytes _str(str text)
cpdef bytes _value(object value, Py_ssize_t depth)
@cython.locals(pieces=list, iids=list, short=tuple, found=tuple, prefix=bytes, iid=Py_ssize_t, small_int_head=bytes, body=bytes, size=Py_ssize_t)
cpdef tuple encode_annotations(dict args)
@cython.locals(fields=bytes, emitted=set, found=tuple, n=Py_ssize_t, body=Py_ssize_t, size=Py_ssize_t, p="unsigned char *", prefix=bytes)
cpdef bint put_annotated_event(TrackEventWriter writer, Py_ssize_t key, int event_type, long long ts, dict args) except -1
@cython.locals(overflow=int, number="long long", length=Py_ssize_t, size=Py_ssize_t, total=Py_ssize_t)
cdef Py_ssize_t _simple_value_size(object value) except -2
@cython.locals(overflow=int, number=double, length=Py_ssize_t, text="const char *")
cdef unsigned char *_put_simple_value(unsigned char *p, object value) except? NULL
