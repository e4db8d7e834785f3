import cython

cdef int _PROCESS_TREE
cdef int _PROCESSES
cdef int _PROCESS_PID
cdef int _PROCESS_CMDLINE


cdef class Function:
    cdef public str name
    cdef public str location
    cdef public long long calls
    cdef public long long total_ns
    cdef public long long self_ns
    cdef public long long max_ns
    cdef public long long active
    cdef public Py_ssize_t active_stack
    cdef public dict others


cdef class Frame:
    cdef public Function func
    cdef public long long begin
    cdef public long long children_ns
    cdef public bint outer
    cdef public bint counted_in_others


cdef class Track:
    cdef public unsigned long long uuid
    cdef public Py_ssize_t key
    cdef public list frames
    cdef public Py_ssize_t depth


cdef class SliceObserver:
    cdef began(self, Track track, Frame frame)
    cdef ended(self, Track track, Frame frame, long long duration)
    cdef instant(self, unsigned long long uuid, long long ts, Function func)
    cdef counter(self, unsigned long long uuid, long long ts, double value)


cdef class _Sequence:
    cdef public dict functions
    cdef public dict locations
    cdef public dict tracks
    cdef public Track track
    cdef public unsigned long long default_track
    cdef public long long default_clock
    cdef public long long clock_id
    cdef public long long clock_ns


@cython.final
cdef class SliceReader:
    cdef public dict functions
    cdef public list stacks
    cdef public dict threads
    cdef public dict processes
    cdef public dict track_names
    cdef public dict counter_tracks
    cdef public SliceObserver observer
    cdef public list slowest
    cdef public Py_ssize_t limit
    cdef public long long threshold
    cdef public long long packets
    cdef public long long calls
    cdef public long long packets_after_loss
    cdef public long long unmatched_ends
    cdef public long long unnamed
    cdef public long long unclocked
    cdef public long long first_ns
    cdef public long long last_ns
    cdef dict _sequences
    cdef long long _seq_id
    cdef _Sequence _seq
    cdef Py_ssize_t _at
    cdef bytes _data

    @cython.locals(value="unsigned long long")
    cdef inline unsigned long long _varint(self, const unsigned char[::1] buf, Py_ssize_t pos, Py_ssize_t end) noexcept
    @cython.locals(size="unsigned long long")
    cdef Py_ssize_t _skip(self, const unsigned char[::1] buf, Py_ssize_t pos, Py_ssize_t end, int wire_type, str where) except -1
    cdef str _string(self, Py_ssize_t pos, Py_ssize_t end)
    @cython.locals(buf="const unsigned char[::1]", start=Py_ssize_t, tag="unsigned long long", size="unsigned long long", wire_type=int)
    cpdef Py_ssize_t feed(self, bytes data, Py_ssize_t pos, Py_ssize_t end, long long base) except -1
    @cython.locals(
        ts="long long", sequence_id="long long", flags="unsigned long long", cleared="unsigned long long",
        dropped="unsigned long long", clock="long long", event=Py_ssize_t, event_end=Py_ssize_t,
        interned=Py_ssize_t, interned_end=Py_ssize_t, defaults=Py_ssize_t, defaults_end=Py_ssize_t,
        other=int, other_pos=Py_ssize_t, other_end=Py_ssize_t, tag="unsigned long long",
        value="unsigned long long", size="unsigned long long", field_id="unsigned long long",
        wire_type=int, seq=_Sequence, found=_Sequence, more_interned=list, at=Py_ssize_t, stop=Py_ssize_t,
    )
    cdef _packet(self, const unsigned char[::1] buf, Py_ssize_t pos, Py_ssize_t end)
    @cython.locals(
        kind="unsigned long long", name_iid="unsigned long long", location_iid="unsigned long long",
        uuid="unsigned long long", name_at=Py_ssize_t, name_end=Py_ssize_t, tag="unsigned long long",
        value="unsigned long long", size="unsigned long long", field_id="unsigned long long",
        wire_type=int, track=Track, known=Track, func=Function, frame=Frame, frames=list, depth=Py_ssize_t,
        others=dict, open_here=Py_ssize_t, key=Py_ssize_t, number=double,
    )
    cdef _event(self, const unsigned char[::1] buf, Py_ssize_t pos, Py_ssize_t end, long long ts, _Sequence seq)
    @cython.locals(interned=Function)
    cdef Function _named(self, _Sequence seq, Py_ssize_t name_at, Py_ssize_t name_end, unsigned long long name_iid, bint call)
    @cython.locals(track=list)
    cdef _counter(self, unsigned long long uuid, long long ts, double value)
    @cython.locals(depth=Py_ssize_t, frame=Frame, func=Function, duration="long long", parent=Frame, others=dict, open_here=Py_ssize_t)
    cdef _end(self, Track track, long long ts)
    cdef _slow(self, long long duration, long long begin, str name, unsigned long long uuid)
    cdef Function _function(self, str name)
    @cython.locals(tag="unsigned long long", value="unsigned long long", size="unsigned long long", wire_type=int)
    cdef list _fields(self, const unsigned char[::1] buf, Py_ssize_t pos, Py_ssize_t end)
    cdef _defaults(self, const unsigned char[::1] buf, Py_ssize_t pos, Py_ssize_t end, _Sequence seq)
    cdef _interned(self, const unsigned char[::1] buf, Py_ssize_t pos, Py_ssize_t end, _Sequence seq)
    cdef _clock_snapshot(self, const unsigned char[::1] buf, Py_ssize_t pos, Py_ssize_t end, _Sequence seq)
    cdef _track_descriptor(self, const unsigned char[::1] buf, Py_ssize_t pos, Py_ssize_t end)
    cdef _process_tree(self, const unsigned char[::1] buf, Py_ssize_t pos, Py_ssize_t end)
    @cython.locals(count="long long", track=Track)
    cpdef long long open_slices(self)
