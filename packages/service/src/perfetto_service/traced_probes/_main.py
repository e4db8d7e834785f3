"""The `traced_probes` command: the host's own data (upstream's probes data sources) as a
producer on traced's producer socket.

The socket is found as traced finds it: the first of PERFETTO_PRODUCER_SOCK_NAME, else
/run/perfetto/traced-producer.sock when /run/perfetto/ is accessible, else
/tmp/perfetto-producer. traced_probes waits for traced to appear, and exits once traced goes
away or on SIGTERM/SIGINT, stopping every data source first.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Sequence

from perfetto_service.ipc._default_socket import PRODUCER_SOCKET_ENV, producer_socket_names
from perfetto_service.traced._main import (
    _configure_logging,
    _daemonize,
    _error,
    _Parser,
    _report_status,
    version_line,
)
from perfetto_service.traced_probes._probes_producer import ProbesProducer

__all__ = ["main"]

NOTIFY_FD_ENV = "TRACED_PROBES_NOTIFY_FD"
"""A file descriptor traced_probes writes "1" to (and closes) once its data sources are
registered."""
_PROG = "traced_probes"


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=_PROG,
        description="Records the host's own data (the process tree, process and system "
        "counters, CPUs, ftrace) for Perfetto traces: a producer on traced's producer socket.",
    )
    parser.add_argument(
        "--background",
        action="store_true",
        help="start, print the daemon's pid and return once its data sources are registered",
    )
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="log protocol details too (debug level)"
    )
    return parser


def _notify_ready() -> None:
    value = os.environ.pop(NOTIFY_FD_ENV, "")
    if not value:
        return
    try:
        fd = int(value)
        os.write(fd, b"1")
        os.close(fd)
    except (ValueError, OSError) as exc:
        print(f"{_PROG}: cannot notify {NOTIFY_FD_ENV}={value}: {exc}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Runs traced_probes; returns the exit status."""
    args = _parser().parse_args(argv)
    _configure_logging(verbose=args.verbose)
    if args.version:
        print(version_line(_PROG))
        return 0
    producers = producer_socket_names()
    if not producers:
        return _error(f"{PRODUCER_SOCKET_ENV} names no socket", _PROG)
    if args.background:
        status = _daemonize(_PROG)
        if status is not None:
            return status
    loop = asyncio.new_event_loop()

    def ready() -> None:
        if not _report_status("ok"):
            _notify_ready()

    producer = ProbesProducer(loop, producers[0], ready, loop.stop)
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, loop.stop)
    if not args.background:  # a daemon's log starts once it detached (at `ready`)
        logging.getLogger("traced_probes").info("Started traced_probes on %s", producers[0])
    producer.connect()
    try:
        loop.run_forever()
    finally:
        producer.close()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
        loop.close()
    return 0
