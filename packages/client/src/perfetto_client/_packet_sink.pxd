# Writing a packet straight into a perfetto_smb TraceWriter's chunk (compiled build only; a
# declaration file with no module: `_track_event_writer` cimports it).
#
# The functions come from perfetto_smb._trace_writer's NATIVE_PACKET_API capsules, taken when
# a sequence is bound to a TraceWriter: cimporting perfetto_smb would make
# `import perfetto_client` import it and its protos. `pc_reserve_packet` frames a packet of
# `size` bytes and returns where they go (NULL: use write_packet); the caller writes exactly
# `size` bytes there, then calls `pc_commit_packet`, with nothing in between. Varints are
# written with protozero's one codec (`protozero/_varint.pxd`).

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
    """
    unsigned char *pc_reserve_packet(void *fn, object writer, Py_ssize_t size) except? NULL
    int pc_commit_packet(void *fn, object writer, Py_ssize_t size) except -1
    unsigned char *pc_put_bytes(unsigned char *p, bytes data)
