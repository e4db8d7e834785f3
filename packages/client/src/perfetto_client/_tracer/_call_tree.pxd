import cython

from perfetto_client._tracer._slices cimport Frame, Function, SliceReader, Track


cdef class CallNode:
    cdef public object func
    cdef public long long calls
    cdef public long long total_ns
    cdef public dict children
    cdef public CallNode other


cdef CallNode _other(CallNode node)


cdef class _Mirror:
    cdef public Track track
    cdef public CallNode root
    cdef public list nodes
    cdef public Py_ssize_t depth


@cython.final
cdef class CallTree:
    cdef public SliceReader reader
    cdef public list mirrors
    cdef public list top_slices
    cdef public long long top_slices_dropped
    cdef public long long folded_calls
    cdef public long long max_paths
    cdef long long _kept
    cdef _Mirror _last
    cdef dict _self_seen
    cdef Py_ssize_t _at
    cdef long long _paths

    @cython.locals(
        buf="const unsigned char[::1]", end=Py_ssize_t, pos=Py_ssize_t, at=Py_ssize_t, stop=Py_ssize_t,
        tag="unsigned long long", value="unsigned long long", wire_type=int, reader=SliceReader,
    )
    cpdef Py_ssize_t feed(self, bytes data, long long base) except -1
    @cython.locals(value="unsigned long long", shift=int, byte="unsigned char")
    cdef unsigned long long _varint(self, const unsigned char[::1] buf, Py_ssize_t pos, Py_ssize_t end) noexcept
    @cython.locals(last=_Mirror, mirror=_Mirror)
    cdef _moved(self)
    @cython.locals(
        track=Track, depth=Py_ssize_t, node=CallNode, parent=CallNode, found=CallNode, frame=Frame,
        func=Function, seen="long long", duration="long long",
    )
    cdef _follow(self, _Mirror mirror)
