"""Perfetto's IPC protocol over UNIX and TCP sockets.

Layers, bottom up: framing (`FrameDecoder`, `encode_frame`); the sans-I/O protocol cores
(`Host`/`HostConnection` and `ClientConnection`), which turn bytes into handler calls and
callbacks and never touch a socket; and thin socket adapters: `HostServer` (asyncio),
`AsyncClient` (asyncio) and `Client` (a background thread, for code without asyncio).
"""

from importlib.metadata import version as _version

from perfetto_wire._async_client import AsyncClient, ServiceUnavailableError, reconnect_delay
from perfetto_wire._client import (
    BindCallback,
    ClientConnection,
    ConnectionClosedError,
    MethodNotAvailableError,
    Reply,
    ReplyCallback,
    RequestRejectedError,
    ServiceProxy,
)
from perfetto_wire._descriptors import MethodDescriptor, ServiceDescriptor, UnknownServiceError
from perfetto_wire._endpoint import FrameEndpoint, Transport
from perfetto_wire._errors import WireError
from perfetto_wire._framing import (
    IPC_BUFFER_SIZE,
    MAX_PAYLOAD_SIZE,
    FrameDecoder,
    FrameTooLargeError,
    encode_frame,
)
from perfetto_wire._host import (
    ClientInfo,
    ConnectionCallback,
    Deferred,
    Handler,
    Host,
    HostConnection,
    machine_id_for,
)
from perfetto_wire._server import DEFAULT_SEND_TIMEOUT, HostServer
from perfetto_wire._sockets import (
    SocketAddress,
    TruncatedMessageError,
    parse_address,
    peer_credentials,
    remove_stale_socket,
)
from perfetto_wire._threaded_client import Client
from perfetto_wire._transport import SocketTransport

__version__: str = _version("perfetto-wire")

__all__ = [
    "DEFAULT_SEND_TIMEOUT",
    "IPC_BUFFER_SIZE",
    "MAX_PAYLOAD_SIZE",
    "AsyncClient",
    "BindCallback",
    "Client",
    "ClientConnection",
    "ClientInfo",
    "ConnectionCallback",
    "ConnectionClosedError",
    "Deferred",
    "FrameDecoder",
    "FrameEndpoint",
    "FrameTooLargeError",
    "Handler",
    "Host",
    "HostConnection",
    "HostServer",
    "MethodDescriptor",
    "MethodNotAvailableError",
    "Reply",
    "ReplyCallback",
    "RequestRejectedError",
    "ServiceDescriptor",
    "ServiceProxy",
    "ServiceUnavailableError",
    "SocketAddress",
    "SocketTransport",
    "Transport",
    "TruncatedMessageError",
    "UnknownServiceError",
    "WireError",
    "__version__",
    "encode_frame",
    "machine_id_for",
    "parse_address",
    "peer_credentials",
    "reconnect_delay",
    "remove_stale_socket",
]
