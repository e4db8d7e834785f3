"""Socket names, socket creation, SCM_RIGHTS fd passing and SO_PEERCRED, for Linux."""

from __future__ import annotations

import array
import contextlib
import errno
import logging
import os
import socket
import stat
import struct
from dataclasses import dataclass
from typing import Any

from perfetto_wire._errors import WireError

__all__ = [
    "FD_ANCILLARY_SIZE",
    "ListenError",
    "SocketAddress",
    "TruncatedMessageError",
    "connect_socket",
    "fd_ancillary",
    "fd_from_ancillary",
    "listen_socket",
    "parse_address",
    "peer_credentials",
    "recv_with_fd",
    "remove_stale_socket",
    "send_with_fd",
]

_log = logging.getLogger("perfetto_wire")

_VSOCK_PREFIX = "vsock://"
# Room for one int of SCM_RIGHTS payload; like upstream, a second fd may still fit the
# padding and is then closed.
FD_ANCILLARY_SIZE = socket.CMSG_SPACE(struct.calcsize("i"))
_UCRED = struct.Struct("iII")  # pid, uid, gid


class TruncatedMessageError(WireError):
    """The kernel truncated a received message or its ancillary data (fds were closed)."""


@dataclass(frozen=True, slots=True)
class SocketAddress:
    """A parsed Perfetto socket name: family and what `bind`/`connect` take."""

    name: str
    family: socket.AddressFamily
    sockaddr: Any

    @property
    def is_unix(self) -> bool:
        """Whether the socket is AF_UNIX (and so can pass fds and read peer credentials)."""
        return self.family == socket.AF_UNIX

    @property
    def filesystem_path(self) -> str | None:
        """The file backing a linked AF_UNIX socket; None for abstract and network sockets."""
        if self.is_unix and not self.name.startswith("@"):
            return self.name
        return None


_MAX_PORT = 0xFFFF


def parse_address(name: str) -> SocketAddress:
    """Parses a socket name the way upstream does.

    `@name` is an abstract AF_UNIX socket, `vsock://CID:PORT` is AF_VSOCK, a name ending in
    `:<port>` is TCP (`[addr]:port` for IPv6), anything else is an AF_UNIX path.
    """
    if not name:
        raise WireError("empty socket name")
    if name.startswith("@"):
        return SocketAddress(name, socket.AF_UNIX, "\0" + name[1:])
    if name.startswith(_VSOCK_PREFIX):
        cid, sep, port = name[len(_VSOCK_PREFIX) :].partition(":")
        if not sep or not cid.isdigit() or not port.isdigit():
            raise WireError(f"bad vsock address {name!r}, expected vsock://CID:PORT")
        return SocketAddress(name, socket.AF_VSOCK, (int(cid), int(port)))
    host, sep, port = name.rpartition(":")
    if sep and _is_int(port):
        if not 0 <= int(port) <= _MAX_PORT:
            raise WireError(f"bad port in {name!r}: a TCP port is 0 to {_MAX_PORT}")
        if host.startswith("["):
            if not host.endswith("]"):
                raise WireError(f"bad IPv6 address {name!r}, expected [addr]:port")
            return SocketAddress(name, socket.AF_INET6, (host[1:-1], int(port)))
        return SocketAddress(name, socket.AF_INET, (host, int(port)))
    return SocketAddress(name, socket.AF_UNIX, name)


def _is_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


def _new_socket(address: SocketAddress) -> socket.socket:
    sock = socket.socket(address.family, socket.SOCK_STREAM)
    sock.setblocking(False)
    if address.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def listen_socket(name: str, backlog: int = socket.SOMAXCONN) -> socket.socket:
    """A non-blocking listening socket bound to `name`. A linked path must not exist yet."""
    address = parse_address(name)
    sock = _new_socket(address)
    try:
        if address.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address.sockaddr)
        sock.listen(backlog)
    except OSError as exc:
        sock.close()
        raise ListenError(name, exc) from exc
    return sock


class ListenError(WireError):
    """A socket could not be bound or listened on; `errno` says why (None if unknown)."""

    def __init__(self, name: str, cause: OSError) -> None:
        super().__init__(f"cannot listen on {name}: {cause.strerror or cause}")
        self.errno = cause.errno


def connect_socket(address: SocketAddress) -> tuple[socket.socket, bool]:
    """Starts a non-blocking connect; returns the socket and whether it is already connected.

    Raises `OSError` if the connection failed straight away (e.g. nobody listens).
    """
    sock = _new_socket(address)
    try:
        err = sock.connect_ex(address.sockaddr)
    except OSError:
        sock.close()
        raise
    if err == 0:
        return sock, True
    if err == errno.EINPROGRESS:
        return sock, False
    sock.close()
    raise OSError(err, os.strerror(err))


def remove_stale_socket(path: str) -> bool:
    """Removes `path` if it is a UNIX socket file nobody listens on any more.

    Returns whether it was removed. A path that is not a socket, or a live socket, is left
    alone (the latter raises `WireError`: another service owns it).
    """
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return False
    if not stat.S_ISSOCK(mode):
        return False
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(path)
    except ConnectionRefusedError:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        return True
    except OSError as exc:
        _log.debug("probing %s: %s", path, exc)
        return False
    finally:
        probe.close()
    raise WireError(f"{path} is in use by a live service")


def peer_credentials(sock: socket.socket) -> tuple[int, int]:
    """The (uid, pid) of the process on the other end of an AF_UNIX socket (SO_PEERCRED)."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
    pid, uid, _gid = _UCRED.unpack(raw)
    return uid, pid


def fd_ancillary(fd: int) -> list[tuple[int, int, bytes]]:
    """The ancillary data of a sendmsg that passes `fd` with SCM_RIGHTS."""
    return [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", (fd,)).tobytes())]


def send_with_fd(sock: socket.socket, data: bytes | memoryview, fd: int) -> int:
    """One sendmsg of `data` with `fd` in SCM_RIGHTS; returns the bytes sent."""
    return sock.sendmsg([data], fd_ancillary(fd))


def recv_with_fd(sock: socket.socket, buffer: memoryview) -> tuple[int, int | None]:
    """One recvmsg into `buffer`: the bytes received and at most one fd (extra fds are closed).

    Raises `TruncatedMessageError` (after closing any fds) when the kernel truncated the
    ancillary data, `BlockingIOError` when nothing is ready.
    """
    nbytes, ancdata, flags, _ = sock.recvmsg_into([buffer], FD_ANCILLARY_SIZE)
    if not ancdata:
        return nbytes, None
    return nbytes, fd_from_ancillary(ancdata, flags)


def fd_from_ancillary(ancdata: list[tuple[int, int, bytes]], flags: int) -> int | None:
    """The first fd of a recvmsg's SCM_RIGHTS data; closes the others (all, if truncated)."""
    fds = array.array("i")
    for level, kind, payload in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
    if flags & (socket.MSG_CTRUNC | socket.MSG_TRUNC):
        for extra in fds:
            os.close(extra)
        raise TruncatedMessageError("socket message truncated; received fds were closed")
    for extra in fds[1:]:
        _log.debug("closing extra fd %d received in one message", extra)
        os.close(extra)
    return fds[0] if fds else None
