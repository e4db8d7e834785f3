"""A hostile heapprofd client: `hostile_client.py UID` becomes UID, connects, and attacks the
ring buffer it is given (shrinks it, then writes garbage into its data and metadata).

Prints `SEALS N` (the buffer's F_GET_SEALS), `FTRUNCATE RESULT` (`ok` or the errno's name),
`ATTACKED` once the garbage is written and `DROPPED` when the daemon closes the connection.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import mmap
import os
import struct
import sys
import time

from heapprofd._wire import client_handshake

_PR_SET_DUMPABLE = 4


def main() -> None:
    uid = int(sys.argv[1])
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
    # a uid change makes the process undumpable: its /proc/self/mem would be root's
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_DUMPABLE, 1, 0, 0, 0)
    assert os.getuid() == uid
    assert os.geteuid() == uid
    deadline = time.monotonic() + 30
    while True:  # the session that matches this program may still be starting
        try:
            sock, _config, ring_fd = client_handshake(os.environ["PERFETTO_HEAPPROFD_SOCK_NAME"])
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    print(f"SEALS {fcntl.fcntl(ring_fd, fcntl.F_GET_SEALS)}", flush=True)
    size = os.fstat(ring_fd).st_size
    try:
        os.ftruncate(ring_fd, 0)
        print("FTRUNCATE ok", flush=True)
    except OSError as exc:
        print(f"FTRUNCATE {errno.errorcode.get(exc.errno or 0, exc.errno)}", flush=True)
    page = mmap.PAGESIZE
    if os.fstat(ring_fd).st_size == size:
        ring = mmap.mmap(ring_fd, size)
        ring[page : page + 4096] = os.urandom(4096)
        struct.pack_into("<I", ring, page, 120)  # a record of 120 bytes of garbage
        struct.pack_into("<QQ", ring, 8, 0, 128)  # read_pos, write_pos
        ring[32:144] = os.urandom(112)  # the client's stats and flags
    sock.send(b"x")  # wakes the daemon
    print("ATTACKED", flush=True)
    sock.settimeout(None)
    while sock.recv(4096):
        pass
    print("DROPPED", flush=True)


if __name__ == "__main__":
    main()
