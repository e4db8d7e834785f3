"""The Perfetto tracing service (traced) and the internal producer/consumer API.

Layout, as upstream's `src/tracing/`: `core` is the service itself (sessions, buffers, the
trace it writes), `ipc` puts it behind upstream's sockets and holds the clients that reach it
from another process, `traced` is the daemon.
"""

from importlib.metadata import version as _version

from perfetto_service._errors import ServiceError
from perfetto_service._interfaces import (
    AsyncioTaskRunner,
    ClientIdentity,
    Consumer,
    ConsumerEndpoint,
    Producer,
    ProducerEndpoint,
    TaskRunner,
    TracePacketSlices,
)
from perfetto_service.core._read_slicer import trace_file_bytes
from perfetto_service.core._tracing_service import TracingService, flush_flags
from perfetto_service.ipc._default_socket import consumer_socket_name, producer_socket_names
from perfetto_service.ipc.consumer._consumer_ipc_client import ConsumerIPCClient
from perfetto_service.ipc.producer._producer_ipc_client import ProducerIPCClient
from perfetto_service.ipc.service._consumer_port import ConsumerPort
from perfetto_service.ipc.service._host import ServiceIPCHost
from perfetto_service.ipc.service._producer_port import ProducerPort

__version__: str = _version("perfetto-service")

__all__ = [
    "AsyncioTaskRunner",
    "ClientIdentity",
    "Consumer",
    "ConsumerEndpoint",
    "ConsumerIPCClient",
    "ConsumerPort",
    "Producer",
    "ProducerEndpoint",
    "ProducerIPCClient",
    "ProducerPort",
    "ServiceError",
    "ServiceIPCHost",
    "TaskRunner",
    "TracePacketSlices",
    "TracingService",
    "__version__",
    "consumer_socket_name",
    "flush_flags",
    "producer_socket_names",
    "trace_file_bytes",
]
