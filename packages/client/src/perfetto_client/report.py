"""perfetto-trace's report of a trace file as a page, for other commands (`heap_profile --html`).

The names load on first use: the SDK's modules do not import the tracer's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from perfetto_client._lazy import load

if TYPE_CHECKING:
    from perfetto_client._tracer._html_report import write_html_report
    from perfetto_client._tracer._report import ReportError

_LAZY = {
    "ReportError": "perfetto_client._tracer._report",
    "write_html_report": "perfetto_client._tracer._html_report",
}


def __getattr__(name: str) -> Any:
    """Loads `ReportError` and `write_html_report` on first use."""
    return load(__name__, _LAZY, name)


__all__ = ["ReportError", "write_html_report"]
