"""traced_probes' data sources: the host's own data (ftrace, the process tree, system counters)
as TracePackets, for whichever host runs them (`traced_probes` on the producer socket, or
`perfetto-trace run --sched` in-process)."""

from typing import TYPE_CHECKING, Any

from protozero import _native

_native.select_build(__name__)

from perfetto_probes._data_source import (
    DATA_SOURCES,
    DataSourceFactory,
    PacketSink,
    ProbesDataSource,
    data_source_factory,
)
from perfetto_probes._errors import ProbesError

__all__ = [
    "DATA_SOURCES",
    "DataSourceFactory",
    "PacketSink",
    "ProbesDataSource",
    "ProbesError",
    "data_source_factory",
]

_native.report(__name__)


if TYPE_CHECKING:
    __version__: str
else:

    def __getattr__(name: str) -> Any:
        if name != "__version__":
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        from importlib.metadata import version  # costs as much as the package: only when asked

        globals()["__version__"] = value = version("perfetto-probes")
        return value
