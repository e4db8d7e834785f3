import cython

from cpython.ref cimport PyObject

from perfetto_client._categories cimport Category
from perfetto_client._track_event cimport slice_enter, slice_exit

cdef class TracedFunction:
    cdef void *_vectorcall
    cdef dict __dict__
    cdef object __weakref__
    cdef object _fn
    cdef Category _cat
    cdef Py_ssize_t _key


@cython.locals(writers=tuple)
cdef object _traced_vectorcall(TracedFunction self, PyObject **args, size_t nargsf, PyObject *kwnames)
