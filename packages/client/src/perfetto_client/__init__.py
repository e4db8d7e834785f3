"""The Perfetto client library for Python programs: track events and custom data sources."""

from importlib.metadata import version as _version

from perfetto_protos.config.trace_config_pb2 import TraceConfig

from perfetto_client._api import (
    Flow,
    begin,
    counter,
    end,
    instant,
    is_enabled,
    trace,
    trace_event,
)
from perfetto_client._categories import Category
from perfetto_client._data_source import DataSource, FlushArgs, StopArgs, TraceContext
from perfetto_client._debug_annotations import Traceable
from perfetto_client._errors import TracingError
from perfetto_client._session import TracingSession
from perfetto_client._tracing import Backend, Tracing
from perfetto_client._tracks import (
    GLOBAL,
    CounterTrack,
    CounterUnit,
    NamedTrack,
    ProcessTrack,
    ThreadTrack,
    Track,
)

__version__: str = _version("perfetto-client")

__all__ = [
    "GLOBAL",
    "Backend",
    "Category",
    "CounterTrack",
    "CounterUnit",
    "DataSource",
    "Flow",
    "FlushArgs",
    "NamedTrack",
    "ProcessTrack",
    "StopArgs",
    "ThreadTrack",
    "TraceConfig",
    "TraceContext",
    "Traceable",
    "Tracing",
    "TracingError",
    "TracingSession",
    "Track",
    "__version__",
    "begin",
    "counter",
    "end",
    "instant",
    "is_enabled",
    "trace",
    "trace_event",
]
