import cython


cdef dict _name_fields

cdef bytes _str(str text)
cpdef bytes _value(object value, Py_ssize_t depth)
@cython.locals(pieces=list, iids=list, short=tuple, found=tuple, prefix=bytes, iid=Py_ssize_t, small_int_head=bytes, body=bytes, size=Py_ssize_t)
cpdef tuple encode_annotations(dict args)
