cdef class Track:
    cdef dict __dict__
    cdef object __weakref__
    cdef public object uuid
    cdef public object parent_uuid
    cdef public object parent
    cdef public bytes _uuid_field

    cpdef bytes event_fields(self, int event_type)
