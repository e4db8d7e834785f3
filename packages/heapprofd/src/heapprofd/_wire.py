"""heapprofd's wire protocol: the handshake, `ClientConfiguration` and the ring buffer records.

Byte layouts are upstream's (`ClientConfiguration` 4656 bytes, `AllocMetadata` 328,
`FreeEntry` 24, `HeapName` 80, each record starting with a uint64 record type); the
`PythonFrame` record (type 3) is our extension, described in docs/heapprofd.md.
"""

from __future__ import annotations

import array
import os
import socket
import struct
from dataclasses import dataclass, field

from heapprofd._errors import HeapprofdError

__all__ = [
    "CLIENT_CONFIGURATION_SIZE",
    "HEAP_NAME_SZ",
    "MAX_HEAPS",
    "RECORD_FREE",
    "RECORD_HEAP_NAME",
    "RECORD_MALLOC",
    "RECORD_PYTHON_FRAME",
    "SOCKET_ENV",
    "ClientConfiguration",
    "client_handshake",
    "default_socket_path",
    "pack_free",
    "pack_heap_name",
    "pack_malloc",
    "pack_python_frame",
    "receive_handshake",
    "send_configuration",
]

RECORD_FREE = 0
RECORD_MALLOC = 1
RECORD_HEAP_NAME = 2
RECORD_PYTHON_FRAME = 3

HEAP_NAME_SZ = 64
MAX_HEAPS = 64
CLIENT_CONFIGURATION_SIZE = 4656
ALLOC_METADATA_SIZE = 328
REGISTER_DATA_SIZE = 272

SOCKET_ENV = "PERFETTO_HEAPPROFD_SOCK_NAME"
"""Names the daemon's listening socket (ours; upstream hard-codes /dev/socket/heapprofd)."""

_UPSTREAM_SOCKET = "/dev/socket/heapprofd"
_FALLBACK_SOCKET = "/tmp/perfetto-heapprofd"

_CONFIG_HEAD = struct.Struct("<QQQQQ")
_CONFIG_HEAP = struct.Struct("<64sQ")
_CONFIG_TAIL = struct.Struct("<????4x")
_ALLOC = struct.Struct("<QQQQQQQ272sII")
_FREE = struct.Struct("<QQQI4x")
_HEAP_NAME = struct.Struct("<QQI64s4x")
_PYTHON_FRAME = struct.Struct("<QQIIII")
_CLIENT_SOCK_TIMEOUT_S = 1.0


def default_socket_path() -> str:
    """`$PERFETTO_HEAPPROFD_SOCK_NAME`, else upstream's path when /dev/socket is writable."""
    env = os.environ.get(SOCKET_ENV)
    if env:
        return env
    if os.access(os.path.dirname(_UPSTREAM_SOCKET), os.W_OK):
        return _UPSTREAM_SOCKET
    return _FALLBACK_SOCKET


@dataclass
class ClientConfiguration:
    """What the daemon tells a client: intervals per heap, blocking, and heap selection."""

    default_interval: int = 4096
    block_client_timeout_us: int = 0
    adaptive_sampling_shmem_threshold: int = 0
    adaptive_sampling_max_sampling_interval_bytes: int = 0
    heaps: list[tuple[str, int]] = field(default_factory=list)
    block_client: bool = False
    disable_fork_teardown: bool = False
    disable_vfork_detection: bool = False
    all_heaps: bool = False

    def pack(self) -> bytes:
        """Upstream's 4656-byte layout."""
        if len(self.heaps) > MAX_HEAPS:
            raise HeapprofdError(f"at most {MAX_HEAPS} heaps")
        parts = [
            _CONFIG_HEAD.pack(
                self.default_interval,
                self.block_client_timeout_us,
                len(self.heaps),
                self.adaptive_sampling_shmem_threshold,
                self.adaptive_sampling_max_sampling_interval_bytes,
            )
        ]
        for name, interval in self.heaps:
            parts.append(_CONFIG_HEAP.pack(name.encode()[: HEAP_NAME_SZ - 1], interval))
        parts.append(b"\0" * (_CONFIG_HEAP.size * (MAX_HEAPS - len(self.heaps))))
        parts.append(
            _CONFIG_TAIL.pack(
                self.block_client,
                self.disable_fork_teardown,
                self.disable_vfork_detection,
                self.all_heaps,
            )
        )
        return b"".join(parts)

    @classmethod
    def unpack(cls, data: bytes) -> ClientConfiguration:
        if len(data) != CLIENT_CONFIGURATION_SIZE:
            raise HeapprofdError(f"ClientConfiguration of {len(data)} bytes")
        head = _CONFIG_HEAD.unpack_from(data)
        num = min(head[2], MAX_HEAPS)
        heaps = []
        for i in range(num):
            raw, interval = _CONFIG_HEAP.unpack_from(
                data, _CONFIG_HEAD.size + i * _CONFIG_HEAP.size
            )
            heaps.append((raw.split(b"\0", 1)[0].decode(errors="replace"), interval))
        tail = _CONFIG_TAIL.unpack_from(data, _CONFIG_HEAD.size + MAX_HEAPS * _CONFIG_HEAP.size)
        return cls(head[0], head[1], head[3], head[4], heaps, *tail)

    def interval_for(self, heap_name: str) -> int:
        """Upstream's GetHeapSamplingInterval: the heap's interval, 0 when not profiled."""
        for name, interval in self.heaps:
            if name == heap_name[: HEAP_NAME_SZ - 1]:
                return interval
        return self.default_interval if self.all_heaps else 0


def pack_malloc(
    sequence: int, size: int, sample_size: int, address: int, *, heap_id: int, frames: list[int]
) -> bytes:
    """A Malloc record whose payload is the stack's frame ids, innermost first."""
    head = _ALLOC.pack(RECORD_MALLOC, sequence, size, sample_size, address, 0, 0, b"", heap_id, 0)
    return head + array.array("Q", frames).tobytes()


def pack_free(sequence: int, address: int, heap_id: int) -> bytes:
    return _FREE.pack(RECORD_FREE, sequence, address, heap_id)


def pack_heap_name(heap_id: int, name: str, interval: int) -> bytes:
    return _HEAP_NAME.pack(RECORD_HEAP_NAME, interval, heap_id, name.encode()[: HEAP_NAME_SZ - 1])


def pack_python_frame(frame_id: int, function: str, filename: str, line: int) -> bytes:
    name, path = function.encode(), filename.encode()
    head = _PYTHON_FRAME.pack(RECORD_PYTHON_FRAME, frame_id, line, len(name), len(path), 0)
    return head + name + path


def client_handshake(path: str) -> tuple[socket.socket, ClientConfiguration, int]:
    """Connects to the daemon, sends /proc/self/{maps,mem}; returns the socket, the
    configuration and the ring buffer's descriptor. Raises OSError or HeapprofdError."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(_CLIENT_SOCK_TIMEOUT_S * 5)
        sock.connect(path)
        maps = os.open("/proc/self/maps", os.O_RDONLY | os.O_CLOEXEC)
        mem = os.open("/proc/self/mem", os.O_RDONLY | os.O_CLOEXEC)
        try:
            socket.send_fds(sock, [b"x"], [maps, mem])
        finally:
            os.close(maps)
            os.close(mem)
        data = b""
        ring_fd = -1
        while len(data) < CLIENT_CONFIGURATION_SIZE:
            chunk, fds, _flags, _addr = socket.recv_fds(
                sock, CLIENT_CONFIGURATION_SIZE - len(data), 1
            )
            if not chunk:
                raise HeapprofdError("the daemon closed the connection: no profiling session")
            if fds:
                if ring_fd >= 0:
                    os.close(ring_fd)
                ring_fd = fds[0]
            data += chunk
        if ring_fd < 0:
            raise HeapprofdError("the daemon sent no ring buffer")
        sock.setblocking(False)
        return sock, ClientConfiguration.unpack(data), ring_fd
    except BaseException:
        sock.close()
        raise


def receive_handshake(sock: socket.socket) -> tuple[int, int, int] | None:
    """The daemon's side: reads the first byte and the two fds; returns (pid, maps, mem)."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid = struct.unpack("3i", creds)[0]
    data, fds, _flags, _addr = socket.recv_fds(sock, 1, 2)
    if len(data) != 1 or len(fds) != 2:
        for fd in fds:
            os.close(fd)
        return None
    return pid, fds[0], fds[1]


def send_configuration(sock: socket.socket, config: ClientConfiguration, ring_fd: int) -> None:
    """Sends the ClientConfiguration with the ring buffer's descriptor attached."""
    data = config.pack()
    sent = socket.send_fds(sock, [data], [ring_fd])
    if sent < len(data):
        sock.sendall(data[sent:])
