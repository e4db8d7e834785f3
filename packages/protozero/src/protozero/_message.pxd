import cython

from protozero._scattered_stream_writer cimport ScatteredStreamWriter


@cython.locals(p=Py_ssize_t)
cdef Py_ssize_t _store_tag(ScatteredStreamWriter w, Py_ssize_t p, unsigned long long tag) noexcept


cdef class Message:
    cdef public ScatteredStreamWriter stream_writer
    cdef ScatteredStreamWriter _writer
    cdef public Message nested_message
    cdef Py_ssize_t _begin
    cdef Py_ssize_t _size
    cdef bint _compacted
    cdef public object size_field_buffer
    cdef public Py_ssize_t size_field_offset

    cpdef reset(self, ScatteredStreamWriter stream_writer)
    cdef _bind_nested(self, ScatteredStreamWriter stream_writer, Py_ssize_t size_field_offset)
    cpdef set_size_field(self, object buffer, Py_ssize_t offset)
    @cython.locals(w=ScatteredStreamWriter, child=Message, size=Py_ssize_t, o=Py_ssize_t)
    cpdef Py_ssize_t finalize(self) except -1
    @cython.locals(child=Message)
    cdef _end_nested_message(self)
    @cython.locals(w=ScatteredStreamWriter, p=Py_ssize_t, v="unsigned long long")
    cpdef put_varint(self, object tag, object value)
    @cython.locals(w=ScatteredStreamWriter, p=Py_ssize_t, n=Py_ssize_t)
    cpdef put_bytes(self, object tag, object data)
    @cython.locals(w=ScatteredStreamWriter, p=Py_ssize_t, n=Py_ssize_t, data="const char *")
    cpdef put_string(self, object tag, object value)
    @cython.locals(w=ScatteredStreamWriter, p=Py_ssize_t, child=Message)
    cpdef begin_nested(self, object tag, type cls)
