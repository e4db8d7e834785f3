"""The Perfetto tracing service (traced) and the internal producer/consumer API.

Layout, as upstream's `src/tracing/`: `core` is the service itself (sessions, buffers, the
trace it writes), `ipc` puts it behind upstream's sockets and holds the clients that reach it
from another process, `traced` is the daemon.

Importing the package loads nothing else: each name loads its module on first use, so a
program pays only for the parts it touches.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from perfetto_service._errors import ServiceError
    from perfetto_service._interfaces import (
        AsyncioTaskRunner,
        ClientIdentity,
        Consumer,
        ConsumerEndpoint,
        Producer,
        ProducerEndpoint,
        SessionCloned,
        TaskRunner,
        TracePacketSlices,
    )
    from perfetto_service._trace_file import (
        TRACE_PACKET_TAG,
        CorruptTraceError,
        TraceFileEnd,
        TraceFileError,
        read_trace_file,
    )
    from perfetto_service.core._read_slicer import packet_preamble, trace_file_bytes
    from perfetto_service.core._tracing_service import TracingService, flush_flags
    from perfetto_service.core._write_into_file import TRACE_FILE_WRITE_FAILED
    from perfetto_service.ipc._default_socket import consumer_socket_name, producer_socket_names
    from perfetto_service.ipc.consumer._consumer_ipc_client import ConsumerIPCClient
    from perfetto_service.ipc.producer._producer_ipc_client import ProducerIPCClient
    from perfetto_service.ipc.service._consumer_port import ConsumerPort
    from perfetto_service.ipc.service._host import ServiceIPCHost
    from perfetto_service.ipc.service._producer_port import ProducerPort

    __version__: str

_INTERFACES = "perfetto_service._interfaces"
_TRACE_FILE = "perfetto_service._trace_file"
_EXPORTS: dict[str, str] = {
    "AsyncioTaskRunner": _INTERFACES,
    "ClientIdentity": _INTERFACES,
    "Consumer": _INTERFACES,
    "ConsumerEndpoint": _INTERFACES,
    "ConsumerIPCClient": "perfetto_service.ipc.consumer._consumer_ipc_client",
    "ConsumerPort": "perfetto_service.ipc.service._consumer_port",
    "CorruptTraceError": _TRACE_FILE,
    "Producer": _INTERFACES,
    "ProducerEndpoint": _INTERFACES,
    "ProducerIPCClient": "perfetto_service.ipc.producer._producer_ipc_client",
    "ProducerPort": "perfetto_service.ipc.service._producer_port",
    "ServiceError": "perfetto_service._errors",
    "ServiceIPCHost": "perfetto_service.ipc.service._host",
    "SessionCloned": _INTERFACES,
    "TRACE_FILE_WRITE_FAILED": "perfetto_service.core._write_into_file",
    "TRACE_PACKET_TAG": _TRACE_FILE,
    "TaskRunner": _INTERFACES,
    "TraceFileEnd": _TRACE_FILE,
    "TraceFileError": _TRACE_FILE,
    "TracePacketSlices": _INTERFACES,
    "TracingService": "perfetto_service.core._tracing_service",
    "consumer_socket_name": "perfetto_service.ipc._default_socket",
    "flush_flags": "perfetto_service.core._tracing_service",
    "packet_preamble": "perfetto_service.core._read_slicer",
    "producer_socket_names": "perfetto_service.ipc._default_socket",
    "read_trace_file": _TRACE_FILE,
    "trace_file_bytes": "perfetto_service.core._read_slicer",
}

__all__ = [
    "TRACE_FILE_WRITE_FAILED",
    "TRACE_PACKET_TAG",
    "AsyncioTaskRunner",
    "ClientIdentity",
    "Consumer",
    "ConsumerEndpoint",
    "ConsumerIPCClient",
    "ConsumerPort",
    "CorruptTraceError",
    "Producer",
    "ProducerEndpoint",
    "ProducerIPCClient",
    "ProducerPort",
    "ServiceError",
    "ServiceIPCHost",
    "SessionCloned",
    "TaskRunner",
    "TraceFileEnd",
    "TraceFileError",
    "TracePacketSlices",
    "TracingService",
    "__version__",
    "consumer_socket_name",
    "flush_flags",
    "packet_preamble",
    "producer_socket_names",
    "read_trace_file",
    "trace_file_bytes",
]

if not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        if name == "__version__":
            from perfetto_service._version import service_version

            value = service_version()
        else:
            module = _EXPORTS.get(name)
            if module is None:
                raise AttributeError(f"module 'perfetto_service' has no attribute {name!r}")
            value = getattr(importlib.import_module(module), name)
        globals()[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(globals()) | set(__all__))
