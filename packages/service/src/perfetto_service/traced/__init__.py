"""The `traced` daemon and `traced_relay`: the tracing service on its sockets, and its relay."""

from perfetto_service.traced._main import main
from perfetto_service.traced._relay_main import relay_main

__all__ = ["main", "relay_main"]
