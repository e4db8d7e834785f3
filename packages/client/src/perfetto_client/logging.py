"""Python's `logging` in Perfetto traces: `PerfettoLogHandler` writes records as log messages.

logging.getLogger().addHandler(perfetto_client.logging.PerfettoLogHandler(logging.INFO))
"""

from perfetto_client._log_handler import PerfettoLogHandler

__all__ = ["PerfettoLogHandler"]
