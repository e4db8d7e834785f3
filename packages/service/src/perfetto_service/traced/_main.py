"""The `traced` command: the tracing service daemon on its producer and consumer sockets.

Socket names follow upstream: PERFETTO_PRODUCER_SOCK_NAME (a comma-separated list) and
PERFETTO_CONSUMER_SOCK_NAME, else /run/perfetto/traced-{producer,consumer}.sock when
/run/perfetto/ is accessible, else /tmp/perfetto-producer and /tmp/perfetto-consumer.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import grp
import logging
import os
import signal
import socket
import sys
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import NoReturn

from perfetto_wire import (
    DEFAULT_SEND_TIMEOUT,
    ListenError,
    WireError,
    parse_address,
    remove_stale_socket,
)
from protozero import _native

from perfetto_service._errors import ServiceError
from perfetto_service._interfaces import AsyncioTaskRunner
from perfetto_service._version import service_version
from perfetto_service.core._tracing_service import TracingService
from perfetto_service.ipc._default_socket import (
    CONSUMER_SOCKET_ENV,
    PRODUCER_SOCKET_ENV,
    consumer_socket_name,
    producer_socket_names,
)
from perfetto_service.ipc.service._host import ServiceIPCHost
from perfetto_service.traced._log_format import configure_daemon_logging

__all__ = ["main"]

NOTIFY_FD_ENV = "TRACED_NOTIFY_FD"
INIT_PRODUCER_SOCKET_ENV = "ANDROID_SOCKET_traced_producer"
INIT_CONSUMER_SOCKET_ENV = "ANDROID_SOCKET_traced_consumer"
_STATUS_FD_ENV = "_TRACED_STATUS_FD"


@dataclass(frozen=True)
class SocketPermissions:
    """`--set-socket-permissions`: group and mode of the producer and consumer sockets."""

    producer_gid: int
    producer_mode: int
    consumer_gid: int
    consumer_mode: int

    @classmethod
    def parse(cls, text: str) -> SocketPermissions:
        """Parses `prod_group:prod_mode:cons_group:cons_mode`; `ServiceError` if malformed."""
        parts = text.split(":")
        if len(parts) != 4 or not all(parts):
            raise ServiceError(
                f"--set-socket-permissions wants <prod_group>:<prod_mode>:<cons_group>:"
                f"<cons_mode>, got {text!r}"
            )
        return cls(_gid(parts[0]), _mode(parts[1]), _gid(parts[2]), _mode(parts[3]))


def _gid(group: str) -> int:
    try:
        return grp.getgrnam(group).gr_gid
    except KeyError:
        if group.isdigit():
            return int(group)
        raise ServiceError(f"--set-socket-permissions: no group named {group!r}") from None


def _mode(text: str) -> int:
    try:
        mode = int(text, 8)
    except ValueError:
        raise ServiceError(f"--set-socket-permissions: {text!r} is not an octal mode") from None
    if not 0 <= mode <= 0o7777:
        raise ServiceError(f"--set-socket-permissions: mode {text} is out of range")
    return mode


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="traced",
        description="The Perfetto tracing service: producers write trace data, consumers "
        "control sessions and read traces.",
    )
    parser.add_argument(
        "--background",
        action="store_true",
        help="start, print the daemon's pid and return once its sockets accept connections",
    )
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="log connections and protocol details too (debug level)",
    )
    parser.add_argument(
        "--consumer-timeout",
        metavar="SECONDS",
        type=_positive_seconds,
        default=DEFAULT_SEND_TIMEOUT,
        help="how long a consumer, or the reader of a write_into_file pipe, may take nothing "
        "of what traced sends before it is cut off and its session ends with an error "
        "(default %(default)g; a reader that keeps reading is never cut off)",
    )
    parser.add_argument(
        "--set-socket-permissions",
        metavar="PG:PM:CG:CM",
        help="group and octal mode of the producer and consumer sockets, "
        "e.g. traced-producer:0660:traced-consumer:0660",
    )
    parser.add_argument(
        "--enable-relay-endpoint",
        action="store_true",
        help="serve RelayPort (for traced_relay) on every producer socket",
    )
    parser.add_argument(
        "--enable-relay-endpoint-on",
        metavar="SOCKET",
        action="append",
        default=[],
        help="serve RelayPort only on this producer socket (one of "
        f"{PRODUCER_SOCKET_ENV}); repeatable",
    )
    parser.add_argument(
        "--max-buffer-memory-mb",
        metavar="MIB",
        type=_positive_int,
        help="refuse sessions whose buffers would take the sizes of all buffers past this many "
        "MiB (default: the machine's memory; buffers use memory only as they fill)",
    )
    return parser


def _relay_sockets(producers: Sequence[str], enable_all: bool, selected: Sequence[str]) -> set[str]:
    """The producer sockets that serve RelayPort; `ServiceError` if one selected is not one."""
    for name in selected:
        if name not in producers:
            raise ServiceError(
                f"--enable-relay-endpoint-on={name} names no producer socket "
                f"(the producer sockets: {','.join(producers)})"
            )
    return set(producers) if enable_all else set(selected)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def _positive_seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not seconds > 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds")
    return seconds


def _filesystem_paths(names: Sequence[str]) -> list[str]:
    paths = []
    for name in names:
        path = parse_address(name).filesystem_path
        if path is not None:
            paths.append(path)
    return paths


def _claim_socket_paths(names: Sequence[str]) -> None:
    """Removes stale socket files; refuses to go on if a live service answers on one."""
    for path in _filesystem_paths(names):
        try:
            remove_stale_socket(path)
        except WireError:
            raise ServiceError(
                f"already running: a tracing service answers on {path} (stop it first, or "
                f"set {PRODUCER_SOCKET_ENV} and {CONSUMER_SOCKET_ENV} to other paths)"
            ) from None
        if os.path.lexists(path):
            raise ServiceError(f"{path} exists and is not a socket; remove it or pick another path")


_LISTEN_HINTS = {
    errno.EACCES: " (is the directory writable?)",
    errno.EPERM: " (is the directory writable?)",
    errno.EROFS: " (the file system is read-only)",
    errno.ENOENT: " (does the directory exist?)",
    errno.EADDRINUSE: " (another process is listening there)",
    errno.EADDRNOTAVAIL: " (no interface has that address)",
}


def _listen_hint(exc: ServiceError) -> str:
    """What to check, for the errors whose cause a user can fix; else nothing."""
    cause = exc.__cause__
    if isinstance(cause, ListenError) and cause.errno is not None:
        return _LISTEN_HINTS.get(cause.errno, "")
    return ""


def _apply_permissions(
    permissions: SocketPermissions, producers: Sequence[str], consumer: str
) -> None:
    targets = [(path, permissions.producer_gid, permissions.producer_mode) for path in producers]
    targets += [(path, permissions.consumer_gid, permissions.consumer_mode) for path in [consumer]]
    for path, gid, mode in targets:
        if parse_address(path).filesystem_path is None:
            continue
        try:
            os.chown(path, -1, gid)
            os.chmod(path, mode)
        except OSError as exc:
            raise ServiceError(
                f"cannot set the permissions of {path}: {exc.strerror or exc}"
            ) from None


class Daemon:
    """One traced instance: the service, its IPC host and the loop they run on."""

    def __init__(
        self,
        producers: Sequence[str],
        consumer: str,
        relay_sockets: Collection[str] = (),
        *,
        max_buffer_bytes: int | None = None,
        consumer_timeout: float = DEFAULT_SEND_TIMEOUT,
    ) -> None:
        self.producers = list(producers)
        self.consumer = consumer
        self.relay_sockets = relay_sockets
        self.loop = asyncio.new_event_loop()
        self.service = TracingService(
            AsyncioTaskRunner(self.loop),
            max_buffer_bytes=max_buffer_bytes,
            file_write_timeout_s=consumer_timeout,
        )
        self.host = ServiceIPCHost(
            self.service, loop=self.loop, consumer_send_timeout=consumer_timeout
        )
        self._owned_paths: list[str] = []

    def start(self, permissions: SocketPermissions | None) -> None:
        """Claims and binds the sockets; `ServiceError` with a one-line reason on failure.

        Sockets created by init (ANDROID_SOCKET_traced_producer and _consumer, both or
        neither) are served as they are instead.
        """
        inherited = _inherited_sockets()
        if inherited is not None:
            self.host.adopt(*inherited)
            self._watch_signals()
            return
        names = [*self.producers, self.consumer]
        _claim_socket_paths(names)
        try:
            self.host.start(self.producers, self.consumer, relay_sockets=self.relay_sockets)
        except ServiceError as exc:
            raise ServiceError(f"{exc}{_listen_hint(exc)}") from None
        self._owned_paths = _filesystem_paths(names)
        if permissions is not None:
            _apply_permissions(permissions, self.producers, self.consumer)
        self._watch_signals()

    def _watch_signals(self) -> None:
        for signum in (signal.SIGTERM, signal.SIGINT):
            self.loop.add_signal_handler(signum, self.loop.stop)

    def run(self) -> None:
        """Serves until SIGTERM or SIGINT, then removes the sockets."""
        try:
            self.loop.run_forever()
        finally:
            self.close()

    def close(self) -> None:
        """Drops every connection and removes the socket files this daemon created."""
        self.host.close()
        for path in self._owned_paths:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        self._owned_paths = []
        for signum in (signal.SIGTERM, signal.SIGINT):
            self.loop.remove_signal_handler(signum)
        self.loop.close()


def _inherited_sockets() -> tuple[list[socket.socket], socket.socket] | None:
    producer = os.environ.get(INIT_PRODUCER_SOCKET_ENV)
    consumer = os.environ.get(INIT_CONSUMER_SOCKET_ENV)
    if producer is None and consumer is None:
        return None
    if producer is None or consumer is None:
        raise ServiceError(
            f"{INIT_PRODUCER_SOCKET_ENV} and {INIT_CONSUMER_SOCKET_ENV} go together; "
            "set both or neither"
        )
    try:
        return [socket.socket(fileno=int(producer))], socket.socket(fileno=int(consumer))
    except (ValueError, OSError) as exc:
        raise ServiceError(f"cannot use the sockets passed by init: {exc}") from None


def _notify_ready() -> None:
    value = os.environ.get(NOTIFY_FD_ENV)
    if not value:
        return
    try:
        fd = int(value)
        os.write(fd, b"1")
        os.close(fd)
    except (ValueError, OSError) as exc:
        print(f"traced: cannot notify {NOTIFY_FD_ENV}={value}: {exc}", file=sys.stderr)


def _error(message: str, prog: str = "traced") -> int:
    print(f"{prog}: {message}", file=sys.stderr)
    return 1


def _daemonize(prog: str = "traced") -> int | None:
    """Forks; the parent waits for the child's start status and returns the exit code.

    Returns None in the child (which carries on as the daemon), after detaching it.
    """
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid > 0:
        os.close(write_end)
        with os.fdopen(read_end, "rb") as status:
            message = status.read().decode(errors="replace")
        if message == "ok":
            print(pid)
            return 0
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
        return _error(message or "the daemon exited while starting", prog)
    os.close(read_end)
    os.setsid()
    os.environ[_STATUS_FD_ENV] = str(write_end)
    return None


def _report_status(message: str) -> bool:
    """Tells a waiting `--background` parent how the start went; False if there is none."""
    value = os.environ.pop(_STATUS_FD_ENV, None)
    if value is None:
        return False
    fd = int(value)
    os.write(fd, message.encode())
    os.close(fd)
    if message == "ok":
        devnull = os.open(os.devnull, os.O_RDWR)
        for target in (0, 1, 2):
            os.dup2(devnull, target)
        os.close(devnull)
    return True


def _configure_logging(*, verbose: bool) -> None:
    """Sessions and producers at info level on stderr (as upstream's traced); -v adds debug."""
    configure_daemon_logging(sys.stderr, verbose=verbose)


def version_line(command: str) -> str:
    """What `COMMAND --version` prints: `COMMAND (perfetto-py) X.Y.Z`."""
    return f"{command} (perfetto-py) {service_version()}"


def main(argv: Sequence[str] | None = None) -> int:
    """Runs traced; returns the exit status."""
    args = _parser().parse_args(argv)
    _configure_logging(verbose=args.verbose)
    if args.version:
        print(version_line("traced"))
        return 0
    try:
        permissions = (
            SocketPermissions.parse(args.set_socket_permissions)
            if args.set_socket_permissions
            else None
        )
    except ServiceError as exc:
        return _error(str(exc))
    producers = producer_socket_names()
    if not producers:
        return _error(f"{PRODUCER_SOCKET_ENV} names no socket")
    consumer = consumer_socket_name()
    try:
        for name in [*producers, consumer]:
            parse_address(name)
        relays = _relay_sockets(
            producers, args.enable_relay_endpoint, args.enable_relay_endpoint_on
        )
    except (WireError, ServiceError) as exc:
        return _error(str(exc))
    if args.background:
        status = _daemonize()
        if status is not None:
            return status
    # Read now: once traced runs out of file descriptors, the metadata could not be read.
    service_version()
    limit_mib = args.max_buffer_memory_mb
    daemon = Daemon(
        producers,
        consumer,
        relays,
        max_buffer_bytes=None if limit_mib is None else limit_mib << 20,
        consumer_timeout=args.consumer_timeout,
    )
    try:
        daemon.start(permissions)
    except ServiceError as exc:
        daemon.close()
        if _report_status(str(exc)):
            return 1
        return _error(str(exc))
    if not _report_status("ok"):
        logging.getLogger("perfetto_service").info(
            "Started traced (%s build), listening on %s (producers) and %s (consumers)",
            "compiled" if all(_native.compiled_modules("perfetto_service").values()) else "pure",
            ", ".join(producers),
            consumer,
        )
    _notify_ready()
    daemon.run()
    return 0
