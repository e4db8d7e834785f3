"""The Perfetto client library for Python programs: track events and custom data sources.

Importing it is cheap: the tracing service, shared memory and protobuf modules load when
`Tracing.initialize` runs (or when one of their names below is first used).
"""

from __future__ import annotations

import os as _os
import sys as _sys
from typing import TYPE_CHECKING, Any

if _os.environ.get("PERFETTO_PY_PURE") == "1":  # importing protozero costs: only when asked
    from protozero import _native

    _native.select_build(__name__)

from perfetto_client import _lazy
from perfetto_client._categories import Category
from perfetto_client._debug_annotations import Traceable
from perfetto_client._errors import TracingError
from perfetto_client._events import (
    Flow,
    begin,
    counter,
    end,
    instant,
    is_enabled,
    trace,
    trace_event,
)
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

if TYPE_CHECKING:
    from perfetto_protos.config.trace_config_pb2 import TraceConfig
    from perfetto_smb import BufferExhaustedPolicy

    from perfetto_client._data_source import DataSource, FlushArgs, StopArgs, TraceContext
    from perfetto_client._session import TracingSession
    from perfetto_client._tracer import record

    __version__: str

_LAZY = {
    "BufferExhaustedPolicy": "perfetto_smb",
    "TraceConfig": "perfetto_protos.config.trace_config_pb2",
    "DataSource": "perfetto_client._data_source",
    "FlushArgs": "perfetto_client._data_source",
    "StopArgs": "perfetto_client._data_source",
    "TraceContext": "perfetto_client._data_source",
    "TracingSession": "perfetto_client._session",
    "record": "perfetto_client._tracer",
}


def __getattr__(name: str) -> Any:
    """Loads the names whose modules are heavy on first use."""
    if name == "__version__":
        # importlib.metadata: 38 ms of CPU, for this name only.
        from importlib.metadata import version

        return version("perfetto-client")
    return _lazy.load(__name__, _LAZY, name)


if _sys.flags.dev_mode or _os.environ.get("PERFETTO_PY_NATIVE_NOTICE") == "1":
    from protozero import _native

    _native.report(__name__)

__all__ = [
    "GLOBAL",
    "Backend",
    "BufferExhaustedPolicy",
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
    "record",
    "trace",
    "trace_event",
]
