"""The daemons' log lines: byte for byte what `logging.Formatter(LINE_FORMAT)` writes."""

from __future__ import annotations

import logging
import sys

import pytest
from perfetto_service.traced._log_format import LINE_FORMAT, DaemonFormatter


def _record(
    message: str, args: tuple[object, ...], created: float, level: int = logging.INFO
) -> logging.LogRecord:
    record = logging.LogRecord("perfetto_service", level, __file__, 1, message, args, None)
    record.created = created
    record.msecs = (created - int(created)) * 1000
    return record


@pytest.mark.parametrize("level", [logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR])
@pytest.mark.parametrize("created", [0.0, 1_790_000_000.0, 1_790_000_000.9995, 1_790_000_001.25])
def test_lines_match_the_standard_formatter(level: int, created: float) -> None:
    ours = DaemonFormatter()
    for message, args in [
        ('Producer %d "%s" connected, uid=%d pid=%d sdk="%s"', (1, "données ✓", 0, 5, "v58")),
        ("no arguments %d", ()),
        ("", ()),
    ]:
        record = _record(message, args, created, level)
        expected = logging.Formatter(LINE_FORMAT).format(_record(message, args, created, level))
        assert ours.format(record) == expected
    # The same second twice: the cached date and time.
    assert ours.format(_record("x", (), created + 0.0001)) == logging.Formatter(LINE_FORMAT).format(
        _record("x", (), created + 0.0001)
    )


def test_an_exception_is_formatted_with_its_traceback() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        exc_info = sys.exc_info()
    record = _record("handler failed", (), 1_790_000_000.5, logging.ERROR)
    record.exc_info = exc_info
    other = _record("handler failed", (), 1_790_000_000.5, logging.ERROR)
    other.exc_info = exc_info
    line = DaemonFormatter().format(record)
    assert line == logging.Formatter(LINE_FORMAT).format(other)
    assert "ValueError: boom" in line
