# Vectorcall for a compiled class's instances (compiled build only; a declaration file with no
# module: `_vectorcall_function` and the recorder's `sys.monitoring` callbacks (`_monitor.pyx`)
# set a class up with it, `VectorcallFunction`'s subclasses' vectorcalls call on with
# `pc_vectorcall`). Cython gives a cdef class's `__call__` only tp_call,
# which makes Python pack every call's arguments into a tuple and a dict.

from cpython.ref cimport PyObject

cdef extern from *:
    """
    static inline PyObject *pc_vectorcall(PyObject *callable, PyObject **args, size_t nargsf,
                                          PyObject *kwnames) {
        return PyObject_Vectorcall(callable, (PyObject *const *)args, nargsf, kwnames);
    }
    /* A new tuple of the `n` objects at `items`. */
    static inline PyObject *pc_tuple_of(PyObject **items, Py_ssize_t n) {
        PyObject *out = PyTuple_New(n);
        if (out == NULL) return NULL;
        for (Py_ssize_t i = 0; i < n; i++) {
            Py_INCREF(items[i]);
            PyTuple_SET_ITEM(out, i, items[i]);
        }
        return out;
    }
    /* Calls of `type`'s instances go to the vectorcallfunc each keeps at `offset` (a type
       without __call__ is given the call through it). */
    static inline void pc_use_vectorcall(PyObject *type, Py_ssize_t offset) {
        PyTypeObject *t = (PyTypeObject *)type;
        t->tp_vectorcall_offset = offset;
        t->tp_flags |= Py_TPFLAGS_HAVE_VECTORCALL;
        if (t->tp_call == NULL) t->tp_call = PyVectorcall_Call;
    }
    """
    object pc_vectorcall(object callable, PyObject **args, size_t nargsf, PyObject *kwnames)
    Py_ssize_t PyVectorcall_NARGS(size_t nargsf)
    tuple pc_tuple_of(PyObject **items, Py_ssize_t n)
    void pc_use_vectorcall(object type, Py_ssize_t offset)
