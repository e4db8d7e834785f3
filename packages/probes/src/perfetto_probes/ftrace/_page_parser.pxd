import cython

cdef int _KIND_INT
cdef int _KIND_CHARS
cdef int _KIND_DATA_LOC
cdef int _KIND_TAIL
cdef int _COMPACT_NONE
cdef int _COMPACT_SWITCH
cdef int _COMPACT_WAKING
cdef unsigned long long _MISSED_EVENTS
cdef unsigned long long _DATA_SIZE_MASK
cdef int _TIME_DELTA_SHIFT
cdef unsigned long long _UINT64_MASK
cdef unsigned long long _LOW32_MASK
cdef unsigned long long _HIGH32_MASK
cdef Py_ssize_t _LENGTH_SIZE
cdef Py_ssize_t _PAGES_PER_BUNDLE
cdef unsigned long long _PID_SLOTS
cdef Py_ssize_t _COMM_SLOTS
cdef Py_ssize_t _COMM_MAX
cdef Py_ssize_t _COMM_KEY


@cython.final
cdef class FieldLayout:
    cdef public int kind
    cdef public Py_ssize_t offset
    cdef public Py_ssize_t size
    cdef public bint signed
    cdef public unsigned long long tag
    cdef public bytes name_field


@cython.final
cdef class EventLayout:
    cdef public unsigned long long event_tag
    cdef public bint generic
    cdef public bytes name_field
    cdef public list fields
    cdef public int compact
    cdef public list compact_fields
    cdef public list pid_fields
    cdef public Py_ssize_t min_size
    cdef public Py_ssize_t bound
    cdef public Py_ssize_t strings


@cython.final
cdef class PageLayout:
    cdef public Py_ssize_t page_size
    cdef public Py_ssize_t commit_offset
    cdef public Py_ssize_t commit_size
    cdef public Py_ssize_t data_offset
    cdef public unsigned int type_padding
    cdef public unsigned int type_time_extend
    cdef public unsigned int type_time_stamp
    cdef public Py_ssize_t common_pid_offset


@cython.locals(value="unsigned long long", i=Py_ssize_t)
cdef inline unsigned long long _uint(const unsigned char *buf, Py_ssize_t p, Py_ssize_t size) noexcept
@cython.locals(value="unsigned long long", bits=Py_ssize_t)
cdef inline unsigned long long _int(const unsigned char *buf, Py_ssize_t p, Py_ssize_t size, bint signed) noexcept
cdef inline unsigned long long _signed32(unsigned long long value) noexcept


@cython.final
cdef class PackedColumn:
    cdef public unsigned long long tag
    cdef bytearray out
    cdef unsigned char[::1] view
    cdef public Py_ssize_t pos

    @cython.locals(start="unsigned char *")
    cdef inline int put(self, unsigned long long value) except -1
    @cython.locals(grown=bytearray)
    cdef void _grow(self) except *


@cython.final
cdef class BundleWriter:
    cdef public unsigned int cpu
    cdef public PageLayout page
    cdef list by_id
    cdef public bint compact_sched
    cdef public bytearray out
    cdef unsigned char[::1] view
    cdef Py_ssize_t pos
    cdef public list packets
    cdef set seen_pids
    cdef unsigned long long[::1] recent_pids
    cdef public set parse_errors
    cdef public unsigned long long events_written
    cdef public unsigned long long last_timestamp
    cdef unsigned long long bundle_start_timestamp
    cdef Py_ssize_t pages_in_bundle
    cdef bint open
    cdef bint lost_events
    cdef list errors
    cdef dict intern
    cdef unsigned char[::1] comm_keys
    cdef long long[::1] comm_indexes
    cdef list switch_columns
    cdef list waking_columns
    cdef unsigned long long last_switch_ts
    cdef unsigned long long last_waking_ts

    cdef void _reserve(self, Py_ssize_t size) except *
    cdef void _open_bundle(self, bint lost_events) except *
    @cython.locals(
        page_ts="unsigned long long", commit="unsigned long long", missed=bint, size=Py_ssize_t,
        status=int, data="const unsigned char *",
    )
    cpdef int parse_page(self, const unsigned char[::1] buf) except -1
    cdef int _page_error(self, unsigned long long timestamp, int status) except -1
    @cython.locals(
        layout=PageLayout, header="unsigned long long", type_len="unsigned int",
        length="unsigned long long", size="unsigned long long", status=int,
    )
    cdef int _parse_records(self, const unsigned char *buf, Py_ssize_t p, Py_ssize_t end, unsigned long long ts) except -1
    @cython.locals(
        event=EventLayout, field=FieldLayout, pid="unsigned long long", p=Py_ssize_t,
        event_id=Py_ssize_t,
        event_start=Py_ssize_t, body=Py_ssize_t, field_start=Py_ssize_t, view="unsigned char[::1]",
    )
    cdef int _record(self, const unsigned char *buf, Py_ssize_t start, Py_ssize_t size, unsigned long long ts) except -1
    @cython.locals(slot="unsigned long long")
    cdef int _saw_pid(self, unsigned long long pid) except -1
    @cython.locals(slot="unsigned long long")
    cpdef set take_seen_pids(self)
    @cython.locals(n=Py_ssize_t)
    cdef Py_ssize_t _copy(self, unsigned char[::1] view, Py_ssize_t p, bytes data) noexcept
    @cython.locals(first=Py_ssize_t, last=Py_ssize_t, end=Py_ssize_t, loc="unsigned long long")
    cdef (Py_ssize_t, Py_ssize_t) _string_span(self, const unsigned char *buf, Py_ssize_t start, Py_ssize_t size, FieldLayout field) noexcept
    @cython.locals(value="unsigned long long", tag="unsigned long long", first=Py_ssize_t, end=Py_ssize_t)
    cdef Py_ssize_t _value(self, unsigned char[::1] view, Py_ssize_t p, const unsigned char *buf, Py_ssize_t start, Py_ssize_t size, FieldLayout field, bint generic) noexcept
    @cython.locals(
        first=Py_ssize_t, end=Py_ssize_t, n=Py_ssize_t, i=Py_ssize_t, h="unsigned int",
        slot=Py_ssize_t, key=Py_ssize_t, comm=bytes, index=object,
    )
    cdef Py_ssize_t _comm_index(self, const unsigned char *buf, Py_ssize_t start, Py_ssize_t size, FieldLayout field) except -1
    @cython.locals(field=FieldLayout, columns=list, column=PackedColumn, last=Py_ssize_t, i=Py_ssize_t, value="unsigned long long", keep_64=bint)
    cdef int _compact(self, const unsigned char *buf, Py_ssize_t start, Py_ssize_t size, unsigned long long ts, EventLayout event) except -1
    @cython.locals(p=Py_ssize_t, i=Py_ssize_t, view="unsigned char[::1]", values="unsigned char[::1]")
    cdef void _packed(self, PackedColumn column) except *
    @cython.locals(begin=Py_ssize_t, p=Py_ssize_t, comm=bytes, column=PackedColumn, slot=Py_ssize_t)
    cdef void _write_compact(self) except *
    @cython.locals(p=Py_ssize_t, begin=Py_ssize_t, view="unsigned char[::1]", timestamp="unsigned long long", status=int)
    cpdef void finish(self) except *
    cpdef list take_packets(self)
