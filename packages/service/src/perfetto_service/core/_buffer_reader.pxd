import cython

from perfetto_service.core._read_slicer cimport ReplyWriter

@cython.locals(
    total=Py_ssize_t, suffix=bytes, old_size=Py_ssize_t, room=Py_ssize_t, i=Py_ssize_t,
    p=Py_ssize_t, start=Py_ssize_t, length=Py_ssize_t, size=Py_ssize_t,
    view="unsigned char[::1]", source="const unsigned char[::1]",
)
cdef Py_ssize_t _append_framed(bytearray out, object data, list valid, bytes first, bytes rest) except -1
@cython.locals(
    total=Py_ssize_t, suffix=bytes, source="const unsigned char[::1]", i=Py_ssize_t,
    start=Py_ssize_t, end=Py_ssize_t, packet=bytes,
)
cdef Py_ssize_t _append_copies(list packets, object data, list valid, bytes first, bytes rest) except -1
@cython.locals(
    total=Py_ssize_t, source="const unsigned char[::1]", first_suffix="const unsigned char[::1]",
    rest_suffix="const unsigned char[::1]", suffix="const unsigned char[::1]",
    suffix_size=Py_ssize_t, i=Py_ssize_t, start=Py_ssize_t, end=Py_ssize_t,
)
cdef Py_ssize_t _append_slices(ReplyWriter writer, object data, list valid, bytes first, bytes rest) except -1
@cython.locals(
    total=Py_ssize_t, count=Py_ssize_t, invalid=Py_ssize_t, offsets=list, valid=list,
    first=bytes, rest=bytes,
)
cdef tuple _drain(object buffer, object trusted_fields, Py_ssize_t threshold, object sink)
