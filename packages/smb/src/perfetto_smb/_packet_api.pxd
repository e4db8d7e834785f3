# The C interface of perfetto_smb's NATIVE_PACKET_API (perfetto_smb._trace_writer), stated once:
# _trace_writer exports its two functions through it, and compiled callers that do not cimport
# _trace_writer (perfetto_client: cimporting it would make `import perfetto_client` import
# perfetto_smb and its protos) call them through it. A declaration file with no module beside
# it: cimporting it imports nothing at run time.
#
# The capsule named PACKET_API_RESERVE holds `unsigned char *reserve(PyObject *writer,
# Py_ssize_t size)`: it frames a packet of `size` bytes in the writer's chunk and returns where
# they go (NULL with no exception set: use write_packet); the caller writes exactly `size`
# bytes there, then calls the one named PACKET_API_COMMIT, `int commit(PyObject *writer,
# Py_ssize_t size)` (0, or -1 with an exception set), with nothing in between.

cdef extern from *:
    """
    #define PERFETTO_SMB_PACKET_API_RESERVE "perfetto_smb.reserve_packet"
    #define PERFETTO_SMB_PACKET_API_COMMIT "perfetto_smb.commit_packet"
    typedef unsigned char *(*perfetto_smb_reserve_packet_fn)(PyObject *writer, Py_ssize_t size);
    typedef int (*perfetto_smb_commit_packet_fn)(PyObject *writer, Py_ssize_t size);
    static inline unsigned char *perfetto_smb_reserve_packet(
            void *fn, PyObject *writer, Py_ssize_t size) {
        return ((perfetto_smb_reserve_packet_fn)fn)(writer, size);
    }
    static inline int perfetto_smb_commit_packet(void *fn, PyObject *writer, Py_ssize_t size) {
        return ((perfetto_smb_commit_packet_fn)fn)(writer, size);
    }
    """
    const char *PACKET_API_RESERVE "PERFETTO_SMB_PACKET_API_RESERVE"
    const char *PACKET_API_COMMIT "PERFETTO_SMB_PACKET_API_COMMIT"
    ctypedef unsigned char *(*reserve_packet_fn "perfetto_smb_reserve_packet_fn")(
        object writer, Py_ssize_t size
    ) except? NULL
    ctypedef int (*commit_packet_fn "perfetto_smb_commit_packet_fn")(
        object writer, Py_ssize_t size
    ) except -1
    # Calls the function a capsule of the API holds.
    unsigned char *reserve_packet "perfetto_smb_reserve_packet"(
        void *fn, object writer, Py_ssize_t size
    ) except? NULL
    int commit_packet "perfetto_smb_commit_packet"(void *fn, object writer, Py_ssize_t size) except -1
