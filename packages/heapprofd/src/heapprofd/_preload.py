"""The native client: the path of the LD_PRELOAD library, and the connection it made, which
the Python client of the same process shares (the daemon takes one connection per process)."""

from __future__ import annotations

import ctypes
import os
import socket
from pathlib import Path

from heapprofd._wire import CLIENT_CONFIGURATION_SIZE, ClientConfiguration

__all__ = ["NATIVE_HEAP", "library_path", "native_unavailable", "preload_connection"]

NATIVE_HEAP = "libc.malloc"
"""Upstream's name of the heap of malloc and its family."""


def library_path() -> Path:
    """libheapprofd_preload.so, shipped beside this module when the package was compiled."""
    return Path(__file__).resolve().parent / "libheapprofd_preload.so"


def native_unavailable() -> str | None:
    """Why native profiling cannot work in this installation, or None when it can."""
    if not library_path().is_file():
        return "heapprofd was installed without its preload library (no C compiler at install)"
    try:
        import heapprofd._dwunwind  # noqa: F401
    except ImportError:
        return (
            "heapprofd was built without elfutils' libdw, which unwinds native stacks"
            " (Debian: apt-get install libdw-dev, then reinstall perfetto-heapprofd)"
        )
    return None


def preload_connection() -> tuple[socket.socket, ClientConfiguration, int] | None:
    """The preload library's connection (its socket and ring buffer descriptor duplicated),
    None when the library is not loaded in this process or did not connect."""
    try:
        function = ctypes.CDLL(None).heapprofd_preload_connection
    except AttributeError:
        return None
    sock_fd, ring_fd = ctypes.c_int(-1), ctypes.c_int(-1)
    config = ctypes.create_string_buffer(CLIENT_CONFIGURATION_SIZE)
    if not function(ctypes.byref(sock_fd), ctypes.byref(ring_fd), config):
        return None
    sock = socket.socket(fileno=os.dup(sock_fd.value))
    sock.setblocking(False)
    return sock, ClientConfiguration.unpack(config.raw), os.dup(ring_fd.value)
