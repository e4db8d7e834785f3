cdef class Category:
    cdef public str name
    cdef public str description
    cdef public tuple tags
    cdef public bint dynamic
    cdef public bint enabled
    cdef public tuple instances
    cdef public object mask
    cdef public dict keys


cdef class CategoryRegistry:
    cdef object _lock
    cdef public dict by_name
    cdef public dict dynamic
    cdef public tuple instances
    cdef public long long generation
    cdef public list on_new_category
