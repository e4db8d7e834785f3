"""perfetto-trace: records every Python call of a program as Perfetto track events.

`perfetto-trace run` is `_cli.main`; from Python, `record(...)` (a context manager and a
decorator). The profile hook is `_hook` (compiled) or `_hook_pure`.
"""

from perfetto_client._tracer._options import TraceOptions
from perfetto_client._tracer._recording import Summary, record

__all__ = ["Summary", "TraceOptions", "record"]
