"""Service and method tables, built from the generated protobuf service descriptors."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache

from google.protobuf import descriptor as _pb_descriptor
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass

from perfetto_wire._errors import WireError

__all__ = ["MethodDescriptor", "ServiceDescriptor", "UnknownServiceError"]

# Where the generated code of each service that Perfetto exposes over IPC lives.
_KNOWN_SERVICES: Mapping[str, str] = {
    "ProducerPort": "perfetto_protos.ipc.producer_port_pb2",
    "ConsumerPort": "perfetto_protos.ipc.consumer_port_pb2",
    "RelayPort": "perfetto_protos.ipc.relay_port_pb2",
}


class UnknownServiceError(WireError):
    """A service name that neither the generated protos nor the host know."""


@dataclass(frozen=True, slots=True)
class MethodDescriptor:
    """One RPC: its name, 1-based id in declaration order, and message classes."""

    id: int
    name: str
    request_type: type[Message]
    reply_type: type[Message]


@dataclass(frozen=True, slots=True)
class ServiceDescriptor:
    """A service's bare name and its methods in `.proto` declaration order."""

    name: str
    methods: tuple[MethodDescriptor, ...]
    _by_name: dict[str, MethodDescriptor] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        by_name: dict[str, MethodDescriptor] = {}
        for expected_id, method in enumerate(self.methods, start=1):
            if method.id != expected_id:
                raise WireError(
                    f"{self.name}.{method.name} has id {method.id}, expected {expected_id}"
                )
            if method.name in by_name:
                raise WireError(f"{self.name} declares {method.name} twice")
            by_name[method.name] = method
        object.__setattr__(self, "_by_name", by_name)

    @classmethod
    def from_proto(cls, service: _pb_descriptor.ServiceDescriptor) -> ServiceDescriptor:
        """Builds the table of a generated protobuf service (ids from 1 in declaration order)."""
        methods = tuple(
            MethodDescriptor(
                id=index,
                name=method.name,
                request_type=GetMessageClass(method.input_type),
                reply_type=GetMessageClass(method.output_type),
            )
            for index, method in enumerate(service.methods, start=1)
        )
        return cls(service.name, methods)

    @classmethod
    def for_service(cls, name: str) -> ServiceDescriptor:
        """The table of one of Perfetto's IPC services: ProducerPort, ConsumerPort, RelayPort."""
        return _known_service(name)

    def method(self, name: str) -> MethodDescriptor:
        """The method called `name`; `KeyError` if the service has none."""
        return self._by_name[name]

    def has_method(self, name: str) -> bool:
        """Whether the service declares a method called `name`."""
        return name in self._by_name

    def truncated(self, method_count: int) -> ServiceDescriptor:
        """The service as an older version that declared only its first `method_count` methods."""
        if not 0 <= method_count <= len(self.methods):
            raise WireError(f"{self.name} has {len(self.methods)} methods, not {method_count}")
        return ServiceDescriptor(self.name, self.methods[:method_count])


@cache
def _known_service(name: str) -> ServiceDescriptor:
    module_name = _KNOWN_SERVICES.get(name)
    if module_name is None:
        raise UnknownServiceError(
            f"unknown IPC service {name!r}; known: {', '.join(sorted(_KNOWN_SERVICES))}"
        )
    module = importlib.import_module(module_name)
    file_descriptor: _pb_descriptor.FileDescriptor = module.DESCRIPTOR
    return ServiceDescriptor.from_proto(file_descriptor.services_by_name[name])
