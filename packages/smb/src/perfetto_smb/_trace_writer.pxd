import cython

from protozero._proto_utils cimport write_redundant_varint

cdef Py_ssize_t MAX_PACKETS_PER_CHUNK
cdef Py_ssize_t _HEADER_SIZE
cdef Py_ssize_t _MIN_ROOM_FOR_NEW_PACKET
cdef Py_ssize_t _ONE_BYTE_SIZE_LIMIT


cdef class TraceWriter:
    cdef object __weakref__
    cdef object _arbiter
    cdef public object writer_id
    cdef public object target_buffer
    cdef public object policy
    cdef object _smb
    cdef unsigned char[::1] _view
    cdef unsigned short[::1] _halves
    cdef Py_ssize_t _count_index
    cdef object _garbage
    cdef object _stream
    cdef object _packet
    cdef object _chunk
    cdef public Py_ssize_t _next_chunk_id
    cdef object _patch_list
    cdef Py_ssize_t _range_begin
    cdef Py_ssize_t _size_field
    cdef Py_ssize_t _fragment_start
    cdef bint _fragmenting_packet
    cdef bint _drop_packets
    cdef bint _retry_new_chunk_after_packet
    cdef bint _reached_max_packets_per_chunk
    cdef bint _count_inflated
    cdef bint _first_packet_on_sequence
    cdef bint _closed
    cdef bint _packet_open
    cdef bint _fast
    cdef Py_ssize_t _ptr
    cdef Py_ssize_t _end
    cdef public Py_ssize_t drop_count
    cdef public Py_ssize_t packets_lost
    cdef public object on_resume

    @cython.locals(stream=object)
    cdef Py_ssize_t _fast_path_room(self) except? -2
    # Stable API for compiled callers (cimport perfetto_smb._trace_writer): one call writes
    # one whole packet; see the package README.
    @cython.locals(size=Py_ssize_t, room=Py_ssize_t, room_after=Py_ssize_t, p=Py_ssize_t, end=Py_ssize_t)
    cpdef write_packet(self, object data)
    @cython.locals(p=Py_ssize_t, room=Py_ssize_t)
    cpdef Py_ssize_t reserve_packet(self, Py_ssize_t size) except? -2
    @cython.locals(p=Py_ssize_t)
    cpdef commit_packet(self, Py_ssize_t size)
    cdef bint _enter_fast_path(self) except -1
    cdef int _leave_fast_path(self) except -1
    @cython.locals(index=Py_ssize_t, value=Py_ssize_t, halves="unsigned short[::1]")
    cpdef _account_packets(self, Py_ssize_t count, Py_ssize_t room_after)


# C entry points for compiled callers that do not cimport this module (NATIVE_PACKET_API).
@cython.locals(p=Py_ssize_t)
cdef unsigned char *_native_reserve_packet(TraceWriter writer, Py_ssize_t size) except? NULL
cdef int _native_commit_packet(TraceWriter writer, Py_ssize_t size) except -1
