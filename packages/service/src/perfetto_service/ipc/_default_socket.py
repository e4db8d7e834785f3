"""Where the service listens and clients connect: upstream's default socket names."""

from __future__ import annotations

import os

__all__ = [
    "CONSUMER_SOCKET_ENV",
    "PRODUCER_SOCKET_ENV",
    "consumer_socket_name",
    "producer_socket_names",
]

RUN_PERFETTO_DIR = "/run/perfetto/"
PRODUCER_SOCKET_ENV = "PERFETTO_PRODUCER_SOCK_NAME"
CONSUMER_SOCKET_ENV = "PERFETTO_CONSUMER_SOCK_NAME"


def _use_run_dir() -> bool:
    return os.access(RUN_PERFETTO_DIR, os.X_OK)


def producer_socket_names() -> list[str]:
    """The producer sockets: the service listens on each, a producer connects to the first."""
    name = os.environ.get(PRODUCER_SOCKET_ENV)
    if name is None:
        name = (
            RUN_PERFETTO_DIR + "traced-producer.sock"
            if _use_run_dir()
            else "/tmp/perfetto-producer"
        )
    return [part for part in name.split(",") if part]


def consumer_socket_name() -> str:
    """The consumer socket: where the service listens and consumers connect."""
    name = os.environ.get(CONSUMER_SOCKET_ENV)
    if name is not None:
        return name
    return RUN_PERFETTO_DIR + "traced-consumer.sock" if _use_run_dir() else "/tmp/perfetto-consumer"
