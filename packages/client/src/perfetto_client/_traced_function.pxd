import cython

from cpython.ref cimport PyObject

from perfetto_client._categories cimport Category
from perfetto_client._track_event cimport slice_enter, slice_exit
from perfetto_client._vectorcall_function cimport VectorcallFunction

cdef class TracedFunction(VectorcallFunction):
    cdef Category _cat
    cdef Py_ssize_t _key


@cython.locals(writers=tuple)
cdef object _traced_vectorcall(TracedFunction self, PyObject **args, size_t nargsf, PyObject *kwnames)
