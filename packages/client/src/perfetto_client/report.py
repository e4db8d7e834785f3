"""perfetto-trace's report of a trace file as a page, for other commands (`heap_profile --html`).

The names load on first use: the SDK's modules do not import the tracer's.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from perfetto_client._tracer._html_report import write_html_report
    from perfetto_client._tracer._report import ReportError

_LAZY = {
    "ReportError": "perfetto_client._tracer._report",
    "write_html_report": "perfetto_client._tracer._html_report",
}


def __getattr__(name: str) -> Any:
    """Loads `ReportError` and `write_html_report` on first use."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'perfetto_client.report' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = ["ReportError", "write_html_report"]
