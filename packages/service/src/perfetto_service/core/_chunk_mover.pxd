import cython

from perfetto_service.core._trace_buffer cimport TraceBuffer
from perfetto_smb._reader cimport SharedMemoryReader

cdef unsigned long long _UINT32_MASK
cdef unsigned long long _MAX_TAG
cdef Py_ssize_t _MAX_VARINT_BYTES
cdef Py_ssize_t _BAD
cdef int _CHECK
cdef int _DECODE
cdef int _MOVE
cdef int _VARINT
cdef int _FIXED64
cdef int _BYTES
cdef int _FIXED32

cpdef object target_buffer(dict buffers, object endpoint, object buffer_id, object writer_id)
cpdef object commit_data_request(object request)
@cython.locals(walk=_CommitWalk)
cpdef tuple move_chunks(dict buffers, object endpoint, SharedMemoryReader reader, object request)
@cython.locals(walk=_CommitWalk)
cpdef object decode_commit_data(object request)


cdef class _CommitWalk:
    cdef object request
    cdef const unsigned char[::1] buf
    cdef Py_ssize_t pos
    cdef dict buffers
    cdef object endpoint
    cdef SharedMemoryReader reader
    cdef int mode
    cdef Py_ssize_t discarded
    cdef list moves
    cdef list patches
    cdef unsigned long long flush_request_id
    cdef long long last_buffer_id
    cdef long long last_writer_id
    cdef TraceBuffer target
    cdef object sequence

    @cython.locals(end=Py_ssize_t, tag="unsigned long long")
    cdef bint walk(self) except -1
    @cython.locals(pos=Py_ssize_t, value="unsigned long long", after=Py_ssize_t)
    cdef unsigned long long _varint(self, Py_ssize_t end) noexcept
    @cython.locals(length="unsigned long long", room="unsigned long long")
    cdef Py_ssize_t _message_end(self, Py_ssize_t end) noexcept
    @cython.locals(wire_type=int)
    cdef void _skip(self, unsigned long long tag, Py_ssize_t end) noexcept
    @cython.locals(
        tag="unsigned long long", page="long long", chunk="long long",
        buffer_id="long long", data_start=Py_ssize_t, data_end=Py_ssize_t,
        complete=bint, data=object,
    )
    cdef object _chunk_to_move(self, Py_ssize_t end)
    @cython.locals(
        reader=SharedMemoryReader, opened=bint, writer_id="long long", buffer=TraceBuffer,
    )
    cdef object _move(
        self, long long page, long long chunk, long long buffer_id, bytes data, bint complete,
    )
    @cython.locals(
        tag="unsigned long long", buffer_id="unsigned long long",
        writer_id="unsigned long long", chunk_id="unsigned long long", has_more=bint,
        patches=list,
    )
    cdef object _chunk_to_patch(self, Py_ssize_t end)
    @cython.locals(
        tag="unsigned long long", offset="unsigned long long", data_start=Py_ssize_t,
        data_end=Py_ssize_t,
    )
    cdef object _patch(self, Py_ssize_t end, list patches)
