import cython

from perfetto_client._chunk_packets cimport ChunkPackets, annotation_size
from perfetto_client._track_event_writer cimport TrackEventWriter


cdef dict _name_fields

cdef bytes _str(str text)
cpdef bytes _value(object value, Py_ssize_t depth)
@cython.locals(pieces=list, iids=list, short=tuple, found=tuple, prefix=bytes, iid=Py_ssize_t, small_int_head=bytes, encoded=bytes, size=Py_ssize_t)
cpdef tuple encode_annotations(dict args)
@cython.locals(chunk=ChunkPackets, fields=bytes, prefixes=tuple, n=Py_ssize_t, size=Py_ssize_t, i=Py_ssize_t)
cpdef bint put_annotated_event(TrackEventWriter writer, Py_ssize_t key, int event_type, long long ts, tuple names, tuple values) except -1
cdef Py_ssize_t MAX_CACHED_NAME_TUPLES
@cython.locals(emitted=set, prefixes=list, found=tuple, out=tuple)
cdef tuple _emitted_prefixes(TrackEventWriter writer, tuple names)
