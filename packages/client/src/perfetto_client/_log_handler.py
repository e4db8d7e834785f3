"""The logging bridge: records of Python's `logging` as upstream's TrackEvent log messages."""

from __future__ import annotations

import logging

from perfetto_client._categories import Category
from perfetto_client._track_event import now, thread_writers
from perfetto_client._track_event_writer import event_keys
from perfetto_client._unrecorded import tell_if_nowhere_to_write

__all__ = ["LOG_CATEGORY", "PerfettoLogHandler", "priority"]

LOG_CATEGORY = Category("log", description="records of Python's logging (PerfettoLogHandler)")

# LogMessage.Priority
_PRIO_VERBOSE = 2
_PRIO_DEBUG = 3
_PRIO_INFO = 4
_PRIO_WARN = 5
_PRIO_ERROR = 6
_PRIO_FATAL = 7

_told = False
"""Whether `emit` checked once that tracing is set up in this process."""


def priority(level: int) -> int:
    """The LogMessage priority of a logging level (CRITICAL is FATAL, below DEBUG VERBOSE)."""
    if level >= logging.CRITICAL:
        return _PRIO_FATAL
    if level >= logging.ERROR:
        return _PRIO_ERROR
    if level >= logging.WARNING:
        return _PRIO_WARN
    if level >= logging.INFO:
        return _PRIO_INFO
    if level >= logging.DEBUG:
        return _PRIO_DEBUG
    return _PRIO_VERBOSE


class PerfettoLogHandler(logging.Handler):
    """A `logging` handler writing each record into the running tracing sessions.

    A record is an instant named after its level on the thread's track, with a `log_message`
    (category `log`): the formatted record as its interned body, the file, function and line
    of the logging call as its interned source location, and a priority from its level. The
    trace processor lists them in its log table (the UI's log panel) with their severity.
    Records are written only while a session records the `log` category; the first record
    emitted while nothing in the process can record (no session, tracing not initialized)
    prints one line on stderr saying so.
    """

    def __init__(self, level: int | str = logging.NOTSET) -> None:
        super().__init__(level)

    def emit(self, record: logging.LogRecord) -> None:
        """Writes `record` (formatted with the handler's formatter) as a log message."""
        category = LOG_CATEGORY
        if not category.enabled:
            global _told  # noqa: PLW0603 - checked once per process
            if not _told:
                _told = True
                tell_if_nowhere_to_write("PerfettoLogHandler")
            return
        try:
            body = self.format(record)
        except Exception:
            self.handleError(record)
            return
        writers = thread_writers(category.mask)
        if not writers:
            return
        ts = now()
        key = category.keys.get(record.levelname)
        if key is None:
            key = category.event_key(record.levelname)
        location = event_keys.source_location_iid(record.pathname, record.funcName, record.lineno)
        prio = priority(record.levelno)
        for writer in writers:
            writer.log_message(key, ts, location, body, prio)
