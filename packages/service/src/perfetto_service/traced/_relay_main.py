"""The `traced_relay` command: this machine's producers traced by a `traced` elsewhere.

It listens where producers look for `traced` (PERFETTO_PRODUCER_SOCK_NAME, else the default
producer socket) and relays each producer to PERFETTO_RELAY_SOCK_NAME (`host:port`,
`vsock://CID:PORT` or a path), the producer socket of the central `traced`. Like upstream's,
it cannot run beside a `traced` on the same sockets.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from collections.abc import Sequence

from perfetto_wire import WireError

from perfetto_service._errors import ServiceError
from perfetto_service._version import service_version
from perfetto_service.ipc._default_socket import producer_socket_names
from perfetto_service.ipc.relay._relay_service import (
    RelayClient,
    RelayService,
    machine_id_hint,
    machine_name,
    system_info_message,
)
from perfetto_service.traced._main import (
    _daemonize,
    _filesystem_paths,
    _gid,
    _mode,
    _Parser,
    _report_status,
    version_line,
)

__all__ = ["RELAY_SOCKET_ENV", "relay_main"]

RELAY_SOCKET_ENV = "PERFETTO_RELAY_SOCK_NAME"


def _permissions(text: str) -> tuple[int, int]:
    """`--set-socket-permissions GROUP:MODE`: the gid and octal mode of the listening socket."""
    parts = text.split(":")
    if len(parts) != 2 or not all(parts):
        raise ServiceError(f"--set-socket-permissions wants <group>:<mode>, got {text!r}")
    return _gid(parts[0]), _mode(parts[1])


def _apply_permissions(listen: Sequence[str], permissions: tuple[int, int]) -> None:
    gid, mode = permissions
    for path in _filesystem_paths(listen):  # only a UNIX socket has a file to chmod
        try:
            os.chown(path, -1, gid)
            os.chmod(path, mode)
        except OSError as exc:
            raise ServiceError(
                f"cannot set the permissions of {path}: {exc.strerror or exc}"
            ) from None


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="traced_relay",
        description="Relays this machine's producers to a remote tracing service "
        f"(the producer socket named by {RELAY_SOCKET_ENV}, e.g. 192.168.0.1:20001).",
    )
    parser.add_argument(
        "--machine-id-hint",
        help="what the remote service derives this machine's id from "
        "(default: the kernel's boot id)",
    )
    parser.add_argument(
        "--background",
        action="store_true",
        help="start, print the daemon's pid and return once its socket accepts connections",
    )
    parser.add_argument(
        "--set-socket-permissions",
        metavar="GROUP:MODE",
        help="group and octal mode of the listening socket, e.g. traced-producer:0660",
    )
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    return parser


async def _run(remote: str, hint: str, permissions: tuple[int, int] | None) -> None:
    name = machine_name()
    relay = RelayService(remote, hint=hint, name=name)
    listen = producer_socket_names()
    await relay.start(listen)
    try:
        if permissions is not None:
            _apply_permissions(listen, permissions)
    except ServiceError:
        await relay.close()
        raise
    _report_status("ok")
    synced = False

    def on_synced() -> None:
        nonlocal synced
        if not synced:
            synced = True
            print(f"traced_relay: clocks synced with {remote}", file=sys.stderr, flush=True)

    relay_version = f"perfetto-service {service_version()} (traced_relay)"
    client = RelayClient(
        remote,
        hint=hint,
        name=name,
        system_info=system_info_message(relay_version),
        on_synced=on_synced,
    )
    client.start()
    print(f"traced_relay: relaying {', '.join(listen)} to {remote}", file=sys.stderr, flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        await stop.wait()
    finally:
        client.close()
        await relay.close()


def relay_main(argv: Sequence[str] | None = None) -> int:
    """Runs the relay until SIGTERM or SIGINT; 1 with one line on stderr on a bad setup."""
    args = _parser().parse_args(argv)
    if args.version:
        print(version_line("traced_relay"))
        return 0
    remote = os.environ.get(RELAY_SOCKET_ENV, "")
    if not remote:
        print(
            f"traced_relay: set {RELAY_SOCKET_ENV} to the remote producer socket", file=sys.stderr
        )
        return 1
    hint = args.machine_id_hint if args.machine_id_hint is not None else machine_id_hint()
    try:
        permissions = (
            _permissions(args.set_socket_permissions) if args.set_socket_permissions else None
        )
    except ServiceError as exc:
        print(f"traced_relay: {exc}", file=sys.stderr)
        return 1
    if args.background:
        status = _daemonize("traced_relay")
        if status is not None:
            return status
    try:
        asyncio.run(_run(remote, hint, permissions))
    except (ServiceError, WireError) as exc:
        if not _report_status(str(exc)):
            print(f"traced_relay: {exc}", file=sys.stderr)
        return 1
    return 0
