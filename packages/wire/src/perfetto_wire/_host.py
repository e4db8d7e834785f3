"""The sans-I/O IPC host: exposes services by name and dispatches method invocations."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, cast

from google.protobuf.message import DecodeError, Message
from perfetto_protos.ipc.wire_protocol_pb2 import IPCFrame

from perfetto_wire._call_frames import (
    bind_reply_member,
    decode_invoke,
    encode_bind_reply,
    invoke_reply_header,
)
from perfetto_wire._descriptors import MethodDescriptor, ServiceDescriptor
from perfetto_wire._endpoint import FrameEndpoint, Transport, close_fd
from perfetto_wire._errors import WireError
from perfetto_wire._framing import Buffer, FrameTooLargeError, encode_frame, serialize

__all__ = [
    "ClientInfo",
    "ConnectionCallback",
    "Deferred",
    "Handler",
    "Host",
    "HostConnection",
    "RequestDecoder",
    "machine_id_for",
]

_log = logging.getLogger("perfetto_wire")

INVALID_PID = -1


@dataclass(frozen=True, slots=True)
class ClientInfo:
    """Who is on the other end of one host connection.

    `client_id` is unique within a `Host` and is what per-connection state should be keyed on.
    On UNIX sockets `uid`/`pid` come from SO_PEERCRED; on TCP from the peer's first
    SetPeerIdentity (uid 0 and pid -1 until then), which also sets `machine_id`.
    """

    client_id: int
    uid: int
    pid: int
    machine_id: int = 0
    machine_name: str = ""


class Deferred:
    """One method invocation: its reply channel, caller and received file descriptor.

    A handler replies at most once with `resolve()` (or by returning the reply), streams with
    `resolve(..., has_more=True)` before a final `resolve()`, or fails the call with `reject()`.
    It may also keep the object and reply later. When the caller asked for no reply (drop_reply)
    nothing is sent; once the connection is gone replies are silently discarded.
    """

    __slots__ = ("_connection", "_done", "method", "request_id", "wants_reply")

    def __init__(
        self,
        connection: HostConnection,
        request_id: int,
        method: MethodDescriptor,
        wants_reply: bool,
    ) -> None:
        self._connection = connection
        self._done = False
        self.request_id = request_id
        self.method = method
        self.wants_reply = wants_reply

    @property
    def client(self) -> ClientInfo:
        """The caller's identity."""
        return self._connection.client_info

    @property
    def done(self) -> bool:
        """Whether the final reply (or rejection) has been given."""
        return self._done

    @property
    def connected(self) -> bool:
        """Whether the caller is still connected."""
        return not self._connection.closed

    def resolve(self, reply: Message, *, has_more: bool = False, fd: int | None = None) -> None:
        """Sends `reply` (the final one unless `has_more`), with `fd` attached if given.

        The fd is not consumed: the caller keeps ownership and may close it after this returns.
        """
        if self._done:
            raise WireError(f"{self.method.name}: the call has already been answered")
        if not isinstance(reply, self.method.reply_type):
            raise WireError(
                f"{self.method.name} replies with {self.method.reply_type.__name__}, "
                f"got {type(reply).__name__}"
            )
        self._send(reply, has_more, fd)

    def resolve_serialized(
        self, reply_proto: bytes, *, has_more: bool = False, fd: int | None = None
    ) -> None:
        """Like `resolve`, with the reply already serialized (as upstream would serialize it)."""
        if self._done:
            raise WireError(f"{self.method.name}: the call has already been answered")
        self._send(reply_proto, has_more, fd)

    def stream_serialized(self, replies: Sequence[bytes], *, fd: int | None = None) -> None:
        """Sends serialized `replies`, none of them the final one, in one write (`fd`, if
        given, on its first byte): a peer reading then finds them all at once."""
        if self._done:
            raise WireError(f"{self.method.name}: the call has already been answered")
        if self.wants_reply and replies:
            self._connection.send_replies(self.request_id, replies, fd)

    def _send(self, reply: Message | bytes, has_more: bool, fd: int | None) -> None:
        if not has_more:
            self._done = True
        if not self.wants_reply:
            return
        reply_proto = reply if isinstance(reply, bytes) else serialize(reply)
        try:
            self._connection.send_reply(self.request_id, reply_proto, has_more, fd)
        except FrameTooLargeError:
            self._done = True
            self._connection.send_rejection(self.request_id)
            raise

    def reject(self) -> None:
        """Ends the call with success=false."""
        if self._done:
            raise WireError(f"{self.method.name}: the call has already been answered")
        self._done = True
        if self.wants_reply:
            self._connection.send_rejection(self.request_id)

    def take_received_fd(self) -> int | None:
        """The connection's pending received fd (the caller now owns it), or None."""
        return self._connection.take_received_fd()

    def when_drained(self, callback: Callable[[], None]) -> None:
        """Calls `callback` once the caller has read most of what was sent to it (at once on
        transports that queue nothing); never if the connection is lost first."""
        self._connection.when_drained(callback)


Handler = Callable[[Any, Deferred], Message | None]
"""Serves one method: gets the decoded request and the call; may return the (final) reply.

The request is the method's message, or what the method's request decoder returned.
"""

RequestDecoder = Callable[[Buffer], object]
"""Decodes a method's serialized request in place of protobuf; raises `DecodeError` if it cannot.

Its argument may be a view of the connection's receive buffer, valid until the handler returns.
"""

ConnectionCallback = Callable[[ClientInfo], None]


@dataclass(frozen=True, slots=True)
class _ExposedService:
    service_id: int
    descriptor: ServiceDescriptor
    handlers: tuple[Handler | None, ...]
    decoders: tuple[RequestDecoder | None, ...]
    bind_reply: bytes | None
    """The member of its BindService reply, serialized once (None: built per reply)."""


def _snake_case(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _resolve_handlers(
    descriptor: ServiceDescriptor, handlers: object
) -> tuple[Handler | None, ...]:
    if isinstance(handlers, Mapping):
        unknown = set(handlers) - {method.name for method in descriptor.methods}
        if unknown:
            raise WireError(f"{descriptor.name} has no method {sorted(unknown)}")
        found = [handlers.get(method.name) for method in descriptor.methods]
    else:
        found = [
            getattr(handlers, method.name, None)
            or getattr(handlers, _snake_case(method.name), None)
            for method in descriptor.methods
        ]
    for method, handler in zip(descriptor.methods, found, strict=True):
        if handler is not None and not callable(handler):
            raise WireError(f"the handler of {descriptor.name}.{method.name} is not callable")
    return tuple(found)


def machine_id_for(hint: str) -> int:
    """Upstream's machine id: the low 32 bits of FNV-1a-64 over `hint`, with 0 mapped to 1."""
    digest = 0xCBF29CE484222325
    for byte in hint.encode():
        digest = ((digest ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    low = digest & 0xFFFFFFFF
    return low or 1


class Host:
    """A set of services exposed by name, serving any number of connections.

    Service ids are 1, 2, ... in exposure order; method ids are 1-based in the order the
    descriptor declares them. `on_connect` and `on_disconnect` run for every connection.
    Without `accept_peer_identity` every SetPeerIdentity is ignored, so that no peer can
    claim a uid, pid or machine (a tracing service accepts it only where relays may connect).
    """

    def __init__(
        self,
        *,
        on_connect: ConnectionCallback | None = None,
        on_disconnect: ConnectionCallback | None = None,
        accept_peer_identity: bool = True,
    ) -> None:
        self.accept_peer_identity = accept_peer_identity
        self._services: list[_ExposedService] = []
        self._by_name: dict[str, _ExposedService] = {}
        self._on_connect = on_connect
        self._on_disconnect = on_disconnect
        self._last_client_id = 0
        self._connections: dict[int, HostConnection] = {}

    def expose_service(
        self,
        descriptor: ServiceDescriptor,
        handlers: object,
        request_decoders: Mapping[str, RequestDecoder] | None = None,
    ) -> int:
        """Exposes a service and returns its id.

        `handlers` is a mapping of method name to `Handler`, or an object whose attributes
        named after the methods (as in the .proto, or in snake_case) are the handlers.
        Methods without a handler answer success=false. `request_decoders` maps method names
        to the `RequestDecoder` their requests go through instead of protobuf.
        """
        if descriptor.name in self._by_name:
            raise WireError(f"service {descriptor.name} is already exposed")
        decoders = request_decoders or {}
        unknown = set(decoders) - {method.name for method in descriptor.methods}
        if unknown:
            raise WireError(f"{descriptor.name} has no method {sorted(unknown)}")
        service_id = len(self._services) + 1
        service = _ExposedService(
            service_id,
            descriptor,
            _resolve_handlers(descriptor, handlers),
            tuple(decoders.get(method.name) for method in descriptor.methods),
            bind_reply_member(service_id, [(m.id, m.name) for m in descriptor.methods]),
        )
        self._services.append(service)
        self._by_name[descriptor.name] = service
        return service.service_id

    @property
    def connections(self) -> list[HostConnection]:
        """The connections currently open."""
        return list(self._connections.values())

    def connect(
        self,
        transport: Transport,
        *,
        uid: int | None = None,
        pid: int | None = None,
        peer_address: str | None = None,
    ) -> HostConnection:
        """Accepts a new connection that writes to `transport`.

        Give `uid` and `pid` for AF_UNIX peers (SO_PEERCRED); give `peer_address` (the
        peer's "host:port") for other sockets, whose identity comes from SetPeerIdentity.
        """
        self._last_client_id += 1
        if peer_address is None:
            info = ClientInfo(
                self._last_client_id,
                uid if uid is not None else -1,
                pid if pid is not None else INVALID_PID,
            )
        else:
            info = ClientInfo(self._last_client_id, 0, INVALID_PID)
        connection = HostConnection(self, transport, info, peer_address)
        self._connections[info.client_id] = connection
        self._notify(self._on_connect, info)
        return connection

    def disconnect(self, client_id: int, reason: str) -> bool:
        """Shuts a connection down (e.g. a misbehaving producer); False if it is already gone."""
        connection = self._connections.get(client_id)
        if connection is None:
            return False
        connection.abort(reason)
        return True

    def _notify(self, callback: ConnectionCallback | None, info: ClientInfo) -> None:
        if callback is None:
            return
        try:
            callback(info)
        except Exception:
            _log.exception("connection callback failed for client %d", info.client_id)

    def _connection_closed(self, connection: HostConnection) -> None:
        self._connections.pop(connection.client_info.client_id, None)
        self._notify(self._on_disconnect, connection.client_info)


class HostConnection(FrameEndpoint):
    """The host's side of one connection: bytes in, handler calls, reply bytes out."""

    __slots__ = ("_host", "_identity_set", "_peer_address", "_pending_fd", "client_info")

    def __init__(
        self,
        host: Host,
        transport: Transport,
        client_info: ClientInfo,
        peer_address: str | None,
    ) -> None:
        super().__init__(transport)
        self._host = host
        self.client_info = client_info
        self._peer_address = peer_address
        self._identity_set = False
        self._pending_fd: int | None = None

    @property
    def client_id(self) -> int:
        """The connection's id, unique within its host."""
        return self.client_info.client_id

    def take_received_fd(self) -> int | None:
        """The last received fd that no handler has taken yet (the caller now owns it)."""
        fd, self._pending_fd = self._pending_fd, None
        return fd

    def when_drained(self, callback: Callable[[], None]) -> None:
        """See `Deferred.when_drained`."""
        if self._closed:
            return
        when_drained: Callable[[Callable[[], None]], None] | None = getattr(
            self._transport, "when_drained", None
        )
        if when_drained is None:
            callback()
        else:
            when_drained(callback)

    def send_reply(
        self, request_id: int, reply_proto: bytes, has_more: bool, fd: int | None
    ) -> None:
        """Sends a successful InvokeMethodReply."""
        self._send_framed(
            invoke_reply_header(request_id, has_more, len(reply_proto)), reply_proto, fd
        )

    def send_replies(self, request_id: int, replies: Sequence[bytes], fd: int | None) -> None:
        """Sends InvokeMethodReplies of `request_id` with has_more set, in one write."""
        parts: list[bytes] = []
        for reply_proto in replies:
            parts.append(invoke_reply_header(request_id, True, len(reply_proto)))
            parts.append(reply_proto)
        self._send_all(parts, fd)

    def send_rejection(self, request_id: int) -> None:
        """Sends the final InvokeMethodReply of a call that failed."""
        frame = IPCFrame(request_id=request_id)
        frame.msg_invoke_method_reply.has_more = False
        self._send(encode_frame(frame))

    def _send_failure(self, request_id: int) -> None:
        frame = IPCFrame(request_id=request_id)
        frame.msg_invoke_method_reply.success = False
        self._send(encode_frame(frame))

    def _on_stray_fd(self, fd: int) -> None:
        self._set_pending_fd(fd)

    def _set_pending_fd(self, fd: int) -> None:
        if self._pending_fd is not None:
            close_fd(self._pending_fd)
        self._pending_fd = fd

    def _on_closed(self) -> None:
        if self._pending_fd is not None:
            close_fd(self._pending_fd)
            self._pending_fd = None
        self._host._connection_closed(self)

    def _on_frame_bytes(self, data: Buffer, start: int, end: int, fd: int | None) -> None:
        call = decode_invoke(data, start, end)
        if call is None:
            super()._on_frame_bytes(data, start, end, fd)
            return
        if fd is not None:
            self._set_pending_fd(fd)
        self._invoke(*call)

    def _on_frame(self, frame: IPCFrame, fd: int | None) -> None:
        if fd is not None:
            self._set_pending_fd(fd)
        kind = frame.WhichOneof("msg")
        if kind == "msg_invoke_method":
            invoke = frame.msg_invoke_method
            self._invoke(
                frame.request_id,
                invoke.service_id,
                invoke.method_id,
                invoke.args_proto,
                invoke.drop_reply,
            )
        elif kind == "msg_bind_service":
            self._bind(frame.request_id, frame.msg_bind_service.service_name)
        elif kind == "set_peer_identity":
            self._set_peer_identity(frame.set_peer_identity)
        else:
            _log.debug("client %d sent a frame with no request", self.client_id)
            error = IPCFrame(request_id=frame.request_id)
            error.msg_request_error.error = "unknown request"
            self._send(encode_frame(error))

    def _bind(self, request_id: int, service_name: str) -> None:
        service = self._host._by_name.get(service_name)
        if service is not None and service.bind_reply is not None:
            self._send(encode_bind_reply(request_id, service.bind_reply))
            return
        frame = IPCFrame(request_id=request_id)
        reply = frame.msg_bind_service_reply
        reply.SetInParent()
        if service is not None:
            reply.success = True
            reply.service_id = service.service_id
            for method in service.descriptor.methods:
                reply.methods.add(id=method.id, name=method.name)
        else:
            _log.debug("client %d bound unknown service %r", self.client_id, service_name)
        self._send(encode_frame(frame))

    def _invoke(
        self,
        request_id: int,
        service_id: int,
        method_id: int,
        args_proto: Buffer,
        drop_reply: bool,
    ) -> None:
        services = self._host._services
        if not 1 <= service_id <= len(services):
            self._send_failure(request_id)
            return
        service = services[service_id - 1]
        if not 1 <= method_id <= len(service.handlers):
            self._send_failure(request_id)
            return
        method = service.descriptor.methods[method_id - 1]
        decode = service.decoders[method_id - 1]
        try:
            # protobuf parses any buffer; its stubs only name bytes.
            request = (
                method.request_type.FromString(cast(bytes, args_proto))
                if decode is None
                else decode(args_proto)
            )
        except DecodeError:
            _log.debug("undecodable %s request from client %d", method.name, self.client_id)
            self._send_failure(request_id)
            return
        deferred = Deferred(self, request_id, method, not drop_reply)
        handler = service.handlers[method_id - 1]
        if handler is None:
            _log.debug("%s.%s has no handler", service.descriptor.name, method.name)
            deferred.reject()
            return
        try:
            result = handler(request, deferred)
            if result is not None:
                deferred.resolve(result)
        except Exception:
            _log.exception(
                "handler of %s.%s failed (client %d)",
                service.descriptor.name,
                method.name,
                self.client_id,
            )
            if not deferred.done:
                deferred.reject()

    def _set_peer_identity(self, identity: IPCFrame.SetPeerIdentity) -> None:
        if self._peer_address is None:
            _log.debug("SetPeerIdentity is ignored on UNIX sockets")
            return
        if not self._host.accept_peer_identity:
            _log.debug(
                "SetPeerIdentity refused: client %d is not on a relay socket", self.client_id
            )
            return
        if self._identity_set:
            _log.debug("SetPeerIdentity already received from client %d", self.client_id)
            return
        self._identity_set = True
        hint = identity.machine_id_hint or self._peer_address.rpartition(":")[0]
        self.client_info = replace(
            self.client_info,
            uid=identity.uid,
            pid=identity.pid,
            machine_id=machine_id_for(hint),
            machine_name=identity.machine_name,
        )
