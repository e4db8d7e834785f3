import cython

cdef unsigned char _EMPTY
cdef unsigned char _USED
cdef unsigned char _TOMBSTONE
cdef Py_ssize_t _MIN_CAPACITY
cdef unsigned long long _GOLDEN
cdef unsigned long long _U64


@cython.final
cdef class ChunkIndex:
    cdef object _keys
    cdef readonly unsigned long long[::1] keys
    cdef object _fields
    cdef readonly long long[::1] fields
    cdef object _states
    cdef unsigned char[::1] states
    cdef public list props
    cdef public list seqs
    cdef Py_ssize_t _stride
    cdef Py_ssize_t _capacity
    cdef Py_ssize_t _shift
    cdef Py_ssize_t _live
    cdef Py_ssize_t _tombstones

    cdef object _allocate(self, Py_ssize_t capacity)
    cdef inline Py_ssize_t _home(self, unsigned long long key) noexcept
    @cython.locals(mask=Py_ssize_t, slot=Py_ssize_t, state="unsigned char")
    cpdef Py_ssize_t find(self, unsigned long long key) except -2
    @cython.locals(mask=Py_ssize_t, slot=Py_ssize_t, grow=bint)
    cpdef Py_ssize_t insert(self, unsigned long long key) except -2
    cpdef remove(self, Py_ssize_t slot)
    @cython.locals(
        old_keys="unsigned long long[::1]", old_fields="long long[::1]",
        old_states="unsigned char[::1]", old_props=list, old_seqs=list,
        old_capacity=Py_ssize_t, stride=Py_ssize_t, keys="unsigned long long[::1]",
        fields="long long[::1]", states="unsigned char[::1]", mask=Py_ssize_t, old=Py_ssize_t,
        key="unsigned long long", slot=Py_ssize_t, field=Py_ssize_t,
    )
    cdef object _rehash(self, Py_ssize_t capacity)
    cpdef ChunkIndex copy(self)
