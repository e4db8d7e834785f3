"""Perfetto's IPC protocol over UNIX and TCP sockets.

Layers, bottom up: framing (`FrameDecoder`, `encode_frame`, and `serialize`, which gives a
message the bytes upstream's peers give it); the sans-I/O protocol cores (`Host`/`HostConnection`
and `ClientConnection`), which turn bytes into handler calls and callbacks and never touch a
socket; and thin socket adapters: `HostServer` (asyncio), `AsyncClient` (asyncio) and `Client`
(a background thread, for code without asyncio).

Each name loads its module on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from perfetto_wire._async_client import AsyncClient, ServiceUnavailableError
    from perfetto_wire._client import (
        ConnectionClosedError,
        MethodNotAvailableError,
        Reply,
        ReplyCallback,
        RequestRejectedError,
        ServiceProxy,
    )
    from perfetto_wire._descriptors import ServiceDescriptor
    from perfetto_wire._errors import WireError
    from perfetto_wire._framing import (
        FrameDecoder,
        FrameTooLargeError,
        encode_frame,
        serialize,
    )
    from perfetto_wire._host import ClientInfo, Deferred, Host
    from perfetto_wire._server import DEFAULT_SEND_TIMEOUT, HostServer
    from perfetto_wire._sockets import ListenError, parse_address, remove_stale_socket
    from perfetto_wire._threaded_client import Client

    __version__: str

_EXPORTS: dict[str, str] = {
    "AsyncClient": "perfetto_wire._async_client",
    "Client": "perfetto_wire._threaded_client",
    "ClientInfo": "perfetto_wire._host",
    "ConnectionClosedError": "perfetto_wire._client",
    "DEFAULT_SEND_TIMEOUT": "perfetto_wire._server",
    "Deferred": "perfetto_wire._host",
    "encode_frame": "perfetto_wire._framing",
    "FrameDecoder": "perfetto_wire._framing",
    "FrameTooLargeError": "perfetto_wire._framing",
    "Host": "perfetto_wire._host",
    "HostServer": "perfetto_wire._server",
    "ListenError": "perfetto_wire._sockets",
    "MethodNotAvailableError": "perfetto_wire._client",
    "parse_address": "perfetto_wire._sockets",
    "remove_stale_socket": "perfetto_wire._sockets",
    "Reply": "perfetto_wire._client",
    "ReplyCallback": "perfetto_wire._client",
    "RequestRejectedError": "perfetto_wire._client",
    "ServiceDescriptor": "perfetto_wire._descriptors",
    "ServiceProxy": "perfetto_wire._client",
    "serialize": "perfetto_wire._framing",
    "ServiceUnavailableError": "perfetto_wire._async_client",
    "WireError": "perfetto_wire._errors",
}

__all__ = [
    "DEFAULT_SEND_TIMEOUT",
    "AsyncClient",
    "Client",
    "ClientInfo",
    "ConnectionClosedError",
    "Deferred",
    "FrameDecoder",
    "FrameTooLargeError",
    "Host",
    "HostServer",
    "ListenError",
    "MethodNotAvailableError",
    "Reply",
    "ReplyCallback",
    "RequestRejectedError",
    "ServiceDescriptor",
    "ServiceProxy",
    "ServiceUnavailableError",
    "WireError",
    "__version__",
    "encode_frame",
    "parse_address",
    "remove_stale_socket",
    "serialize",
]

if not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        if name == "__version__":
            from importlib.metadata import version

            value = version("perfetto-wire")
        else:
            module = _EXPORTS.get(name)
            if module is None:
                raise AttributeError(f"module 'perfetto_wire' has no attribute {name!r}")
            value = getattr(importlib.import_module(module), name)
        globals()[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(globals()) | set(__all__))
