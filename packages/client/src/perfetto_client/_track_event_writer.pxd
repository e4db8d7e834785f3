import cython

from perfetto_client._chunk_packets cimport ChunkPackets


cpdef bytes varint(object value)

@cython.locals(size_a=Py_ssize_t, size_b=Py_ssize_t, out=bytes, p="char *")
cdef bytes _concat3(bytes a, bytes b, bytes c)
@cython.locals(total=Py_ssize_t, piece=bytes, out=bytes, p="char *")
cdef bytes _join(tuple pieces)
cdef bytes _field_bytes(bytes tag, bytes data)
cpdef bytes counter_value_field(object value)


cdef class TrackEventWriter:
    cdef object __weakref__
    cdef object _sink
    cdef object _write
    cdef ChunkPackets _chunk
    cdef public object now
    cdef public object clock_id
    cdef public object thread_track_uuid
    cdef object _reset_packets
    cdef public long long last_ts
    cdef public bint cleared
    cdef public bint closed
    cdef list _begin_tails
    cdef list _instant_tails
    cdef dict _heads
    cdef set _emitted_names
    cdef set _emitted_categories
    cdef set _emitted_annotation_names
    cdef dict _annotation_prefixes
    cdef set _emitted_locations
    cdef dict _log_bodies
    cdef long long _last_log_body_iid
    cdef public set seen_tracks
    cdef public object counter_track
    cdef public object thread_name

    cpdef clear_incremental_state(self)
    cpdef _reset(self, long long ts)
    cpdef bytes interned_for(self, Py_ssize_t category_iid, Py_ssize_t name_iid, list annotation_iids=*)
    @cython.locals(delta="long long")
    cdef bytes _timestamp(self, long long ts)
    cdef tuple _event_head(self, Py_ssize_t key, int event_type)
    cpdef slice_begin(self, Py_ssize_t key, long long ts)
    cpdef instant(self, Py_ssize_t key, long long ts)
    @cython.locals(tail=bytes, delta="long long", chunk=ChunkPackets)
    cdef _thread_event(self, list tails, Py_ssize_t key, int event_type, long long ts)
    cdef bytes _new_tail(self, list tails, Py_ssize_t key, int event_type, long long ts)
    @cython.locals(delta="long long", chunk=ChunkPackets)
    cpdef slice_end(self, long long ts)
    @cython.locals(head_key=Py_ssize_t, fields=bytes)
    cpdef event(self, Py_ssize_t key, int event_type, long long ts, bytes extra_fields, bytes interned)
    @cython.locals(overflow=int, number="long long")
    cpdef counter(self, bytes track_field, object value, long long ts)
    @cython.locals(size=Py_ssize_t, delta="long long", stamp=bytes, stamp_value=bytes, pieces=tuple, chunk=ChunkPackets)
    cdef _write_event(self, long long ts, bytes interned, bytes fields, bytes extra, bytes extra2, bytes extra3)
    @cython.locals(bodies=dict, message=bytes)
    cpdef log_message(self, Py_ssize_t key, long long ts, Py_ssize_t location_iid, str body, int priority)
    cpdef ensure_state(self, long long ts)
    cpdef ensure_track(self, object uuid, object descriptor, long long ts)
    cpdef write_raw(self, bytes fields)
    cpdef rebind(self, object sink)
    cpdef close(self)
