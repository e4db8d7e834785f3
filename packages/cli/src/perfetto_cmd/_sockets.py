"""Where the service's sockets are, as upstream's clients find them."""

from __future__ import annotations

import os

__all__ = ["consumer_socket", "producer_socket"]

_RUN_DIR = "/run/perfetto/"


def consumer_socket() -> str:
    """PERFETTO_CONSUMER_SOCK_NAME, else the platform default."""
    name = os.environ.get("PERFETTO_CONSUMER_SOCK_NAME")
    if name:
        return name
    if os.access(_RUN_DIR, os.X_OK):
        return _RUN_DIR + "traced-consumer.sock"
    return "/tmp/perfetto-consumer"


def producer_socket() -> str:
    """The first socket of PERFETTO_PRODUCER_SOCK_NAME, else the platform default."""
    name = os.environ.get("PERFETTO_PRODUCER_SOCK_NAME", "").split(",")[0]
    if name:
        return name
    if os.access(_RUN_DIR, os.X_OK):
        return _RUN_DIR + "traced-producer.sock"
    return "/tmp/perfetto-producer"
