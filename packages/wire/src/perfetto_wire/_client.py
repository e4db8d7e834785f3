"""The sans-I/O IPC client: binds services and invokes their methods by name."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import NamedTuple, TypeVar, cast

from google.protobuf.message import DecodeError, Message
from perfetto_protos.ipc.wire_protocol_pb2 import IPCFrame

from perfetto_wire._call_frames import decode_invoke_reply, encode_invoke
from perfetto_wire._descriptors import MethodDescriptor, ServiceDescriptor
from perfetto_wire._endpoint import FrameEndpoint, Transport, close_fd
from perfetto_wire._errors import WireError
from perfetto_wire._framing import Buffer, encode_frame, serialize

__all__ = [
    "BindCallback",
    "ClientConnection",
    "ConnectionClosedError",
    "MethodNotAvailableError",
    "Reply",
    "ReplyCallback",
    "RequestRejectedError",
    "ServiceProxy",
]

_log = logging.getLogger("perfetto_wire")

M = TypeVar("M", bound=Message)
T = TypeVar("T")


class ConnectionClosedError(WireError):
    """The connection is gone (or never came up), so the request cannot be sent."""


class MethodNotAvailableError(WireError):
    """The bound service does not offer the method (an older host); nothing was sent."""


class RequestRejectedError(WireError):
    """The host answered the request with success=false."""


class Reply(NamedTuple):
    """One reply to an invocation (upstream's AsyncResult).

    `message` is None when `success` is false. `fd` is a file descriptor the host sent with
    this reply; whoever receives the Reply owns it and must close it.
    """

    success: bool
    has_more: bool
    message: Message | None
    fd: int | None = None

    def unwrap(self, message_type: type[M]) -> M:
        """The reply message as `message_type`; raises `RequestRejectedError` on failure."""
        if not self.success or self.message is None:
            raise RequestRejectedError("the host rejected the request")
        if not isinstance(self.message, message_type):
            raise WireError(
                f"reply is a {type(self.message).__name__}, not a {message_type.__name__}"
            )
        return self.message


REJECTED = Reply(success=False, has_more=False, message=None)

ReplyCallback = Callable[[Reply], None]
"""Receives each reply of one invocation; the last one has has_more=False."""


class ServiceProxy:
    """A service bound on one connection: its id and the methods the host offers."""

    __slots__ = ("_callable", "_client", "descriptor", "remote_methods", "service_id")

    def __init__(
        self,
        client: ClientConnection,
        descriptor: ServiceDescriptor,
        service_id: int,
        remote_methods: Mapping[str, int],
    ) -> None:
        self._client = client
        self.descriptor = descriptor
        self.service_id = service_id
        self.remote_methods = dict(remote_methods)
        # The methods both sides know: name -> (the host's id, our descriptor).
        self._callable = {
            method.name: (self.remote_methods[method.name], method)
            for method in descriptor.methods
            if method.name in self.remote_methods
        }

    @property
    def name(self) -> str:
        """The service name."""
        return self.descriptor.name

    @property
    def connected(self) -> bool:
        """Whether the connection this binding lives on is still up."""
        return not self._client.closed

    def has_method(self, name: str) -> bool:
        """Whether both sides know the method, so that it can be invoked."""
        return name in self._callable

    def __repr__(self) -> str:
        return f"ServiceProxy({self.name!r}, service_id={self.service_id})"


BindCallback = Callable[[ServiceProxy | None], None]
"""Receives the bound service, or None if the host does not have it or the connection failed."""


@dataclass(slots=True)
class _PendingBind:
    descriptor: ServiceDescriptor
    callback: BindCallback


@dataclass(slots=True)
class _PendingInvoke:
    method: MethodDescriptor
    callback: ReplyCallback


class ClientConnection(FrameEndpoint):
    """The client's side of one connection: calls in, request bytes out; bytes in, callbacks.

    Request ids count from 1 and are shared by binds and invocations. Callbacks run inside
    `receive_data` (or `connection_lost`, which rejects everything still pending).
    """

    __slots__ = ("_bindings", "_last_request_id", "_pending")

    def __init__(self, transport: Transport) -> None:
        super().__init__(transport)
        self._last_request_id = 0
        self._pending: dict[int, _PendingBind | _PendingInvoke] = {}
        self._bindings: dict[int, ServiceProxy] = {}

    def bind(self, service: ServiceDescriptor | str, callback: BindCallback) -> int:
        """Sends BindService; `callback` gets the `ServiceProxy` or None. Returns the request id."""
        descriptor = (
            service
            if isinstance(service, ServiceDescriptor)
            else ServiceDescriptor.for_service(service)
        )
        if self._closed:
            raise ConnectionClosedError(f"cannot bind {descriptor.name}: connection closed")
        request_id = self._next_request_id()
        frame = IPCFrame(request_id=request_id)
        frame.msg_bind_service.service_name = descriptor.name
        data = encode_frame(frame)
        self._pending[request_id] = _PendingBind(descriptor, callback)
        self._send(data)
        return request_id

    def invoke(
        self,
        service: ServiceProxy,
        method_name: str,
        request: Message,
        callback: ReplyCallback | None,
        *,
        fd: int | None = None,
    ) -> int:
        """Invokes a method; `callback` gets each reply. Returns the request id.

        Without a callback the host is asked not to reply (drop_reply). A method the host did not
        list in its bind reply raises `MethodNotAvailableError` and sends nothing. `fd` is sent
        along (not consumed: the caller still owns it).
        """
        if service._client is not self:
            raise WireError(f"{service!r} is bound on another connection")
        if self._closed:
            raise ConnectionClosedError(f"cannot invoke {method_name}: connection closed")
        target = service._callable.get(method_name)
        if target is None:
            if not service.descriptor.has_method(method_name):
                raise MethodNotAvailableError(f"{service.name} has no method {method_name}")
            raise MethodNotAvailableError(f"the host's {service.name} does not offer {method_name}")
        remote_id, method = target
        if not isinstance(request, method.request_type):
            raise WireError(
                f"{method_name} takes {method.request_type.__name__}, got {type(request).__name__}"
            )
        self._last_request_id += 1
        request_id = self._last_request_id
        data = encode_invoke(
            request_id, service.service_id, remote_id, serialize(request), callback is None
        )
        if callback is not None:
            self._pending[request_id] = _PendingInvoke(method, callback)
        self._send(data, fd)
        return request_id

    def set_peer_identity(
        self, pid: int, uid: int, machine_id_hint: str = "", machine_name: str = ""
    ) -> None:
        """Tells a host on a non-UNIX socket who this client is (relays do this first)."""
        if self._closed:
            raise ConnectionClosedError("cannot send SetPeerIdentity: connection closed")
        frame = IPCFrame(request_id=0)  # like traced_relay: no request id is used up
        identity = frame.set_peer_identity
        identity.pid = pid
        identity.uid = uid
        identity.machine_id_hint = machine_id_hint
        identity.machine_name = machine_name
        self._send(encode_frame(frame))

    @property
    def pending_requests(self) -> int:
        """How many binds and invocations still wait for a reply."""
        return len(self._pending)

    def _next_request_id(self) -> int:
        self._last_request_id += 1
        return self._last_request_id

    def _on_stray_fd(self, fd: int) -> None:
        _log.debug("closing fd %d received without a frame", fd)
        close_fd(fd)

    def _on_closed(self) -> None:
        pending, self._pending = self._pending, {}
        self._bindings.clear()
        for request in pending.values():
            if isinstance(request, _PendingBind):
                run_callback(request.callback, None)
            else:
                run_callback(request.callback, REJECTED)

    def _on_frame_bytes(self, data: Buffer, start: int, end: int, fd: int | None) -> None:
        reply = decode_invoke_reply(data, start, end)
        if reply is None:
            super()._on_frame_bytes(data, start, end, fd)
            return
        request = self._pending.get(reply[0])
        if type(request) is _PendingInvoke:
            self._on_invoke_reply(request, reply, fd)
        elif request is None:
            _log.debug("ignoring a reply to unknown request %d", reply[0])
            if fd is not None:
                close_fd(fd)
        else:
            super()._on_frame_bytes(data, start, end, fd)

    def _on_invoke_reply(
        self, request: _PendingInvoke, reply: tuple[int, bool, bool, Buffer], fd: int | None
    ) -> None:
        """Delivers one reply (request_id, success, has_more, reply_proto) to its caller."""
        request_id, success, has_more, reply_proto = reply
        if not has_more:
            del self._pending[request_id]
        message: Message | None = None
        if success:
            try:
                # protobuf parses any buffer; its stubs only name bytes.
                message = request.method.reply_type.FromString(cast(bytes, reply_proto))
            except DecodeError:
                _log.debug("undecodable %s reply", request.method.name)
        try:
            request.callback(Reply(message is not None, has_more, message, fd))
        except Exception:
            _log.exception("IPC client callback failed")

    def _on_frame(self, frame: IPCFrame, fd: int | None) -> None:
        request_id = frame.request_id
        request = self._pending.get(request_id)
        if request is None:
            _log.debug("ignoring a reply to unknown request %d", request_id)
            if fd is not None:
                close_fd(fd)
            return
        kind = frame.WhichOneof("msg")
        if kind == "msg_invoke_method_reply" and type(request) is _PendingInvoke:
            reply = frame.msg_invoke_method_reply
            decoded = (request_id, reply.success, reply.has_more, reply.reply_proto)
            self._on_invoke_reply(request, decoded, fd)
            return
        del self._pending[request_id]
        if fd is not None:
            close_fd(fd)
        if kind == "msg_bind_service_reply" and type(request) is _PendingBind:
            self._on_bind_reply(request, frame.msg_bind_service_reply)
            return
        if kind == "msg_request_error":
            _log.debug("host error for request %d: %s", request_id, frame.msg_request_error.error)
        else:
            _log.debug("unexpected %s in reply to request %d", kind, request_id)
        if isinstance(request, _PendingBind):
            run_callback(request.callback, None)
        else:
            run_callback(request.callback, REJECTED)

    def _on_bind_reply(self, request: _PendingBind, reply: IPCFrame.BindServiceReply) -> None:
        name = request.descriptor.name
        if not reply.success:
            _log.debug("the host has no service %r", name)
            run_callback(request.callback, None)
            return
        if reply.service_id in self._bindings:
            _log.debug("service id %d of %r is already bound", reply.service_id, name)
            run_callback(request.callback, None)
            return
        methods = {method.name: method.id for method in reply.methods if method.name and method.id}
        proxy = ServiceProxy(self, request.descriptor, reply.service_id, methods)
        self._bindings[reply.service_id] = proxy
        run_callback(request.callback, proxy)


def run_callback(callback: Callable[[T], None], value: T) -> None:
    """Calls user code from the IPC machinery, logging (not propagating) its exceptions."""
    try:
        callback(value)
    except Exception:
        _log.exception("IPC client callback failed")
