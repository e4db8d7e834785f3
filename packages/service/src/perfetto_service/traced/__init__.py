"""The `traced` daemon: the tracing service on its producer and consumer sockets."""

from perfetto_service.traced._main import main

__all__ = ["main"]
