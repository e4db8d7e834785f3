"""perfetto-trace: records every Python call of a program as Perfetto track events.

`perfetto-trace run` is `_cli.main`; from Python, `record(...)` (a context manager and a
decorator). The recorder is `_thread_recorder`, fed by `_hook`/`_monitor` (compiled) or
`_hook_pure`. The names below load on first use: the recorder's modules are not loaded by
importing one of the others (the pytest plugin writes into `_sink` without them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from perfetto_client._lazy import load

if TYPE_CHECKING:
    from perfetto_client._tracer._options import TraceOptions
    from perfetto_client._tracer._recording import record
    from perfetto_client._tracer._summary import Summary

_LAZY = {
    "Summary": "perfetto_client._tracer._summary",
    "TraceOptions": "perfetto_client._tracer._options",
    "record": "perfetto_client._tracer._recording",
}


def __getattr__(name: str) -> Any:
    """Loads `record`, `Summary` and `TraceOptions` on first use."""
    return load(__name__, _LAZY, name)


__all__ = ["Summary", "TraceOptions", "record"]
