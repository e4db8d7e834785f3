# The compiled build's batch of TracePackets (see _packet_batch.py). `write_event` and
# `write_interned_event` are `PacketBatch.write` (without and with interned data) as inline
# functions: a recorder's every event writes through one of them.
import cython
from libc.stdint cimport uint32_t, uint64_t
from libc.string cimport memcpy, memmove

from perfetto_protos.tags.fields_c cimport (
    Trace_packet_TAG,
    TracePacket_interned_data_TAG,
    TracePacket_timestamp_TAG,
    TracePacket_track_event_TAG,
    TrackEvent_name_iid_TAG,
    TrackEvent_source_location_iid_TAG,
    TrackEvent_type_TAG,
    TrackEvent_Type_TYPE_SLICE_BEGIN,
)
from protozero._varint cimport put_varint, varint_size

cdef extern from *:
    """
    #include <time.h>
    static inline uint64_t ptr_now_ns(void) {
        struct timespec t;
        clock_gettime(CLOCK_BOOTTIME, &t);
        return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
    }
    """
    uint64_t now_ns "ptr_now_ns"() nogil


cdef Py_ssize_t _SLACK


@cython.final
cdef class PacketBatch:
    cdef unsigned char* buf
    cdef readonly Py_ssize_t pos
    cdef Py_ssize_t cap
    cdef readonly uint64_t last_ts
    cdef unsigned char seq[8]
    cdef int seq_len

    cpdef start(self, bytes prologue, uint64_t ts)
    cpdef int write(self, int kind, uint32_t iid, uint64_t ts, bint location, bytes blob) except -1
    cpdef bytes data(self)
    cpdef clear(self)
    @cython.locals(grown="unsigned char*")
    cdef int _reserve(self, Py_ssize_t n) except -1


cdef inline int write_event(
    PacketBatch b, int kind, uint32_t iid, uint64_t ts, bint location
) except -1:
    return _put_event(b, kind, iid, ts, location, NULL, 0)


cdef inline int write_interned_event(
    PacketBatch b, int kind, uint32_t iid, uint64_t ts, bint location, bytes blob
) except -1:
    return _put_event(b, kind, iid, ts, location, <const unsigned char*><const char*>blob, len(blob))


cdef inline int _put_event(
    PacketBatch b, int kind, uint32_t iid, uint64_t ts, bint location,
    const unsigned char* blob, Py_ssize_t blob_len,
) except -1:
    cdef unsigned char* p0
    cdef unsigned char* p
    cdef unsigned char* q
    cdef Py_ssize_t body
    cdef int size_len
    if b.pos + 48 + blob_len > b.cap:
        b._reserve(48 + blob_len)
    p0 = b.buf + b.pos
    p = p0 + 2
    # Every tag is 1 byte but the source location's (put_varint of a constant: the C compiler
    # unrolls it).
    p[0] = TracePacket_timestamp_TAG
    p = put_varint(p + 1, ts - b.last_ts)
    b.last_ts = ts
    p[0] = TracePacket_track_event_TAG
    q = p + 2
    q[0] = TrackEvent_type_TAG
    q[1] = <unsigned char>kind
    q += 2
    if iid != 0:
        q[0] = TrackEvent_name_iid_TAG
        q = put_varint(q + 1, iid)
        if location and kind == TrackEvent_Type_TYPE_SLICE_BEGIN:
            q = put_varint(q, TrackEvent_source_location_iid_TAG)
            q = put_varint(q, iid)
    p[1] = <unsigned char>(q - p - 2)
    p = q
    if blob_len:
        p[0] = TracePacket_interned_data_TAG
        p = put_varint(p + 1, blob_len)
        memcpy(p, blob, blob_len)
        p += blob_len
    memcpy(p, b.seq, 8)  # a fixed size: one store (the reserve leaves room)
    p += b.seq_len
    body = p - p0 - 2
    p0[0] = Trace_packet_TAG
    if body < 128:
        p0[1] = <unsigned char>body
    else:
        size_len = varint_size(body)
        memmove(p0 + 1 + size_len, p0 + 2, body)
        put_varint(p0 + 1, body)
        p = p0 + 1 + size_len + body
    b.pos = p - b.buf
    return 0
