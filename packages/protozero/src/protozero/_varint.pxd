# The one varint codec of the compiled build: inline C functions any package's compiled modules
# cimport (a declaration file with no module; cimporting it imports nothing at run time).
#
# The pure build's equivalents, with the same results:
#   varint_size(value)           protozero._proto_utils.varint_size
#   put_varint(p, value)         protozero._proto_utils.store_varint(view, p, value) (at a
#                                position of a buffer) and encode_varint(value) (the bytes)
#   read_varint(buf, pos, end)   protozero._decoder.read_varint


cdef inline int varint_size(unsigned long long value) noexcept nogil:
    """The size in bytes of the shortest varint encoding of `value` (1 to 10)."""
    cdef int size = 1
    while value >= 0x80:
        value >>= 7
        size += 1
    return size


cdef inline unsigned char* put_varint(unsigned char* p, unsigned long long value) noexcept nogil:
    """Stores the shortest varint encoding of `value` at `p` (10 bytes must fit); returns the
    position after it."""
    while value >= 0x80:
        p[0] = <unsigned char>(value | 0x80)
        p += 1
        value >>= 7
    p[0] = <unsigned char>value
    return p + 1


cdef inline (unsigned long long, Py_ssize_t) read_varint(
    const unsigned char[::1] buf, Py_ssize_t pos, Py_ssize_t end
) noexcept:
    """The varint at `buf[pos]`: (value, next position), next = -1 if malformed.

    Values wider than 64 bits are truncated to 64 bits; a varint longer than 10 bytes or one
    that runs past `end` (or the buffer) is malformed.
    """
    cdef unsigned long long value = 0
    cdef int shift = 0
    cdef unsigned char b
    cdef Py_ssize_t limit = pos + 10
    if end < limit:
        limit = end
    if buf.shape[0] < limit:
        limit = buf.shape[0]
    if pos < 0:
        return 0, -1
    while pos < limit:
        b = buf[pos]
        pos += 1
        value |= (<unsigned long long>(b & 0x7F)) << shift
        if b < 0x80:
            return value, pos
        shift += 7
    return 0, -1
