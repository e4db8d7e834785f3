import cython

from protozero._scattered_stream_writer cimport ScatteredStreamWriter


@cython.locals(p=Py_ssize_t)
cdef Py_ssize_t _store_tag(ScatteredStreamWriter w, Py_ssize_t p, unsigned long long tag) noexcept
@cython.locals(i=int)
cdef Py_ssize_t _store_le(ScatteredStreamWriter w, Py_ssize_t p, unsigned long long value, int size) noexcept


cdef class Message:
    cdef public ScatteredStreamWriter stream_writer
    cdef ScatteredStreamWriter _writer
    cdef public Message nested_message
    cdef Py_ssize_t _begin
    cdef Py_ssize_t _size
    cdef bint _compacted
    cdef public object size_field_buffer
    cdef public Py_ssize_t size_field_offset
    cdef Message _spare

    cpdef reset(self, ScatteredStreamWriter stream_writer)
    cdef _bind_nested(self, ScatteredStreamWriter stream_writer, Py_ssize_t size_field_offset)
    cpdef set_size_field(self, object buffer, Py_ssize_t offset)
    @cython.locals(w=ScatteredStreamWriter, child=Message, size=Py_ssize_t, o=Py_ssize_t)
    cpdef Py_ssize_t finalize(self) except -1
    @cython.locals(child=Message)
    cdef _end_nested_message(self)
    cpdef put_varint(self, object tag, object value)
    @cython.locals(w=ScatteredStreamWriter, p=Py_ssize_t)
    @cython.locals(base="unsigned char *")
    cdef _put_varint64(self, unsigned long long tag, unsigned long long value)
    @cython.locals(overflow=int, v="long long")
    cpdef put_zigzag(self, object tag, object value)
    @cython.locals(w=ScatteredStreamWriter, p=Py_ssize_t, v="unsigned long long")
    cpdef put_fixed32(self, object tag, object value)
    @cython.locals(w=ScatteredStreamWriter, p=Py_ssize_t, v="unsigned long long")
    cpdef put_fixed64(self, object tag, object value)
    @cython.locals(w=ScatteredStreamWriter, p=Py_ssize_t, d=double, f=float, bits="unsigned int")
    cpdef put_float(self, object tag, object value)
    @cython.locals(w=ScatteredStreamWriter, p=Py_ssize_t, d=double, bits="unsigned long long")
    cpdef put_double(self, object tag, object value)
    @cython.locals(w=ScatteredStreamWriter, p=Py_ssize_t, n=Py_ssize_t, base="unsigned char *")
    cpdef put_bytes(self, object tag, object data)
    @cython.locals(w=ScatteredStreamWriter, p=Py_ssize_t, n=Py_ssize_t, data="const char *", base="unsigned char *")
    cpdef put_string(self, object tag, object value)
    @cython.locals(w=ScatteredStreamWriter, p=Py_ssize_t, child=Message)
    cpdef begin_nested(self, object tag, type cls)
