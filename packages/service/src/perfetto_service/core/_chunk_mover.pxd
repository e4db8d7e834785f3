import cython

from perfetto_service.core._trace_buffer cimport TraceBuffer
from perfetto_smb._reader cimport SharedMemoryReader

cpdef object target_buffer(dict buffers, object endpoint, object buffer_id, object writer_id)
@cython.locals(
    discarded=Py_ssize_t, last_buffer_id="long long", last_writer_id=Py_ssize_t,
    buffer=TraceBuffer, buffer_id="long long", writer_id=Py_ssize_t, opened=tuple,
    target=tuple, data=bytes,
)
cpdef Py_ssize_t move_chunks(dict buffers, object endpoint, SharedMemoryReader reader, object moves) except -1
