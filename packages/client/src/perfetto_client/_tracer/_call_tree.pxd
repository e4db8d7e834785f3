import cython

from perfetto_client._tracer._slices cimport Frame, Function, SliceObserver, SliceReader, Track


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
    cdef public list in_segment


cdef class CallTree(SliceObserver):
    cdef public SliceReader reader
    cdef public list mirrors
    cdef public list top_slices
    cdef public long long top_slices_dropped
    cdef public long long folded_calls
    cdef public long long max_paths
    cdef public dict instants
    cdef public dict counters
    cdef public long long marks_dropped
    cdef public long long first_mark
    cdef public long long last_mark
    cdef public frozenset segment_names
    cdef public dict segments
    cdef public long long late_segments
    cdef dict _closed
    cdef dict _open
    cdef dict _outside
    cdef long long _kept
    cdef long long _marks
    cdef long long _paths

    cpdef Py_ssize_t feed(self, bytes data, long long base) except -1
    @cython.locals(stacks=list)
    cdef _Mirror _mirror(self, Track track)
    @cython.locals(found=CallNode, node=CallNode)
    cdef CallNode _child(self, CallNode parent, Function func)
    @cython.locals(mirror=_Mirror, depth=Py_ssize_t, node=CallNode, parent=CallNode, func=Function)
    cdef began(self, Track track, Frame frame)
    @cython.locals(tree=CallNode)
    cdef _open_segment(self, Track track, Frame frame)
    @cython.locals(uuid="unsigned long long", found=tuple, closed=list, at=Py_ssize_t)
    cdef CallNode _segment_at(self, Track track, long long ts)
    @cython.locals(mirror=_Mirror, depth=Py_ssize_t, node=CallNode)
    cdef ended(self, Track track, Frame frame, long long duration)
    @cython.locals(depth=Py_ssize_t, node=CallNode, opened=tuple, tree=CallNode, closed=list)
    cdef _segment_ended(self, Track track, _Mirror mirror, Frame frame, long long duration)
    cdef bint _mark(self, long long ts)
    @cython.locals(marks=list)
    cdef instant(self, unsigned long long uuid, long long ts, Function func)
    cdef counter(self, unsigned long long uuid, long long ts, double value)
