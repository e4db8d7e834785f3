"""perfetto-trace's report of a trace file as a page, for other commands (`heap_profile --html`)."""

from perfetto_client._tracer._html_report import write_html_report
from perfetto_client._tracer._report import ReportError

__all__ = ["ReportError", "write_html_report"]
