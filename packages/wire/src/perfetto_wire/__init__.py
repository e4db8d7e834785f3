"""Perfetto's IPC protocol over UNIX and TCP sockets.

Layers, bottom up: framing (`FrameDecoder`, `encode_frame`); the sans-I/O protocol cores
(`Host`/`HostConnection` and `ClientConnection`), which turn bytes into handler calls and
callbacks and never touch a socket; and thin socket adapters: `HostServer` (asyncio),
`AsyncClient` (asyncio) and `Client` (a background thread, for code without asyncio).
"""

from importlib.metadata import version as _version

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
from perfetto_wire._framing import FrameDecoder, FrameTooLargeError, encode_frame
from perfetto_wire._host import ClientInfo, Deferred, Host
from perfetto_wire._server import HostServer
from perfetto_wire._sockets import parse_address, remove_stale_socket
from perfetto_wire._threaded_client import Client

__version__: str = _version("perfetto-wire")

__all__ = [
    "AsyncClient",
    "Client",
    "ClientInfo",
    "ConnectionClosedError",
    "Deferred",
    "FrameDecoder",
    "FrameTooLargeError",
    "Host",
    "HostServer",
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
]
