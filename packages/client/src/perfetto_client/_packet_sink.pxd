# Writing a packet straight into a perfetto_smb TraceWriter's chunk (compiled build only; a
# declaration file with no module: `_track_event_writer` cimports it).
#
# The functions come from perfetto_smb._trace_writer's NATIVE_PACKET_API capsules, taken when
# a sequence is bound to a TraceWriter: cimporting perfetto_smb would make
# `import perfetto_client` import it and its protos. `pc_reserve_packet` frames a packet of
# `size` bytes and returns where they go (NULL: use write_packet); the caller writes exactly
# `size` bytes there, then calls `pc_commit_packet`, with nothing in between.

cdef extern from *:
    """
    typedef unsigned char *(*pc_reserve_packet_fn)(PyObject *writer, Py_ssize_t size);
    typedef int (*pc_commit_packet_fn)(PyObject *writer, Py_ssize_t size);
    static inline unsigned char *pc_reserve_packet(void *fn, PyObject *writer, Py_ssize_t size) {
        return ((pc_reserve_packet_fn)fn)(writer, size);
    }
    static inline int pc_commit_packet(void *fn, PyObject *writer, Py_ssize_t size) {
        return ((pc_commit_packet_fn)fn)(writer, size);
    }
    static inline unsigned char *pc_put_bytes(unsigned char *p, PyObject *data) {
        Py_ssize_t size = PyBytes_GET_SIZE(data);
        memcpy(p, PyBytes_AS_STRING(data), size);
        return p + size;
    }
    static inline int pc_varint_size(unsigned long long value) {
        int size = 1;
        while (value >= 0x80) {
            value >>= 7;
            size++;
        }
        return size;
    }
    static inline unsigned char *pc_put_varint(unsigned char *p, unsigned long long value) {
        while (value >= 0x80) {
            *p++ = (unsigned char)(value | 0x80);
            value >>= 7;
        }
        *p++ = (unsigned char)value;
        return p;
    }
    """
    unsigned char *pc_reserve_packet(void *fn, object writer, Py_ssize_t size) except? NULL
    int pc_commit_packet(void *fn, object writer, Py_ssize_t size) except -1
    unsigned char *pc_put_bytes(unsigned char *p, bytes data)
    int pc_varint_size(unsigned long long value) nogil
    unsigned char *pc_put_varint(unsigned char *p, unsigned long long value) nogil
