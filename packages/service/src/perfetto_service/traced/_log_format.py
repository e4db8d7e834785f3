"""The daemons' log line: `YYYY-MM-DD HH:MM:SS,mmm L message`, made with few calls."""

from __future__ import annotations

import logging
import time
from typing import TextIO

__all__ = ["DaemonFormatter", "configure_daemon_logging"]

LINE_FORMAT = "%(asctime)s %(levelname).1s %(message)s"
"""What `DaemonFormatter` writes, as a `logging.Formatter` format."""


class DaemonFormatter(logging.Formatter):
    """`logging.Formatter(LINE_FORMAT)`, with the date and time formatted once per second.

    A daemon logs a line a few times per session, each time with cold caches: the standard
    formatter's calls (`usesTime`, `formatTime`, `formatMessage`, `strftime` per line) were
    most of a line's cost. Records with an exception or a stack go through the standard path.
    """

    def __init__(self) -> None:
        super().__init__(LINE_FORMAT)
        self._second = -1
        self._date_time = ""

    def format(self, record: logging.LogRecord) -> str:
        """The record's line, as `logging.Formatter(LINE_FORMAT).format` makes it."""
        if record.exc_info or record.exc_text or record.stack_info:
            return super().format(record)
        second = int(record.created)
        if second != self._second:
            self._date_time = time.strftime(self.default_time_format, self.converter(second))
            self._second = second
        message = record.message = record.getMessage()
        return f"{self._date_time},{int(record.msecs):03d} {record.levelname[:1]} {message}"


def configure_daemon_logging(stream: TextIO, *, verbose: bool) -> None:
    """Logs at info level (debug if `verbose`) to `stream` in `DaemonFormatter`'s lines.

    Records do not look up their caller, thread or process: no line prints them.
    """
    logging._srcfile = None  # the logging HOWTO's documented optimization
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    handler = logging.StreamHandler(stream)
    handler.setFormatter(DaemonFormatter())
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
