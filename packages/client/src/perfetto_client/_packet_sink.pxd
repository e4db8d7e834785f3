# Writing a packet straight into a perfetto_smb TraceWriter's chunk (compiled build only; a
# declaration file with no module: `_chunk_packets` cimports it).
#
# The functions come from perfetto_smb._trace_writer's NATIVE_PACKET_API capsules, taken when
# a sequence is bound to a TraceWriter; their C interface is perfetto_smb's `_packet_api.pxd`
# (declarations only: cimporting it does not make `import perfetto_client` import perfetto_smb).
# `pc_reserve_packet` frames a packet of `size` bytes and returns where they go (NULL: use
# write_packet); the caller writes exactly `size` bytes there, then calls `pc_commit_packet`,
# with nothing in between. Varints are written with protozero's one codec
# (`protozero/_varint.pxd`).

from perfetto_smb._packet_api cimport (
    PACKET_API_COMMIT,
    PACKET_API_RESERVE,
    commit_packet as pc_commit_packet,
    reserve_packet as pc_reserve_packet,
)

cdef extern from *:
    """
    static inline unsigned char *pc_put_bytes(unsigned char *p, PyObject *data) {
        Py_ssize_t size = PyBytes_GET_SIZE(data);
        memcpy(p, PyBytes_AS_STRING(data), size);
        return p + size;
    }
    """
    unsigned char *pc_put_bytes(unsigned char *p, bytes data)
