"""The logging bridge with the real `logging`: records as log messages, read with upstream's
schema through the interned data as trace_processor does."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator

import pytest
from in_process_recording import Recorder
from perfetto_client.logging import PerfettoLogHandler

# LogMessage.Priority
DEBUG, INFO, WARN, ERROR, FATAL = 3, 4, 5, 6, 7


@pytest.fixture
def logger() -> Iterator[logging.Logger]:
    log = logging.getLogger("tests.logging")
    log.setLevel(logging.DEBUG)
    handler = PerfettoLogHandler(level=logging.INFO)
    log.addHandler(handler)
    yield log
    log.removeHandler(handler)


def test_records_are_log_messages_with_body_location_and_priority(
    record: Recorder, logger: logging.Logger
) -> None:
    lines = {}

    def body() -> None:
        logger.debug("below the handler's level")
        lines["info"] = _line() + 1
        logger.info("connected to %s", "db")
        logger.warning("slow query: %d ms", 250)
        logger.error("failed")
        logger.critical("down")

    trace = record(body)
    logs = [e for e in trace.events if e.log is not None]
    assert [(e.log.body, e.log.prio) for e in logs] == [  # type: ignore[union-attr]
        ("connected to db", INFO),
        ("slow query: 250 ms", WARN),
        ("failed", ERROR),
        ("down", FATAL),
    ]
    first = logs[0].log
    assert first is not None
    assert (first.file, first.function, first.line) == (__file__, "body", lines["info"])
    assert [e.name for e in logs] == ["INFO", "WARNING", "ERROR", "CRITICAL"]
    assert all(e.kind == "I" and e.categories == ["log"] for e in logs)
    track = trace.tracks[logs[0].track]
    assert track.thread.tid == threading.get_native_id()  # the thread's track: a utid


def test_bodies_and_locations_are_interned_once_per_sequence(
    record: Recorder, logger: logging.Logger
) -> None:
    def body() -> None:
        for i in range(4):
            logger.info("same text")
            logger.info("tick %d", i)

    trace = record(body)
    packets = trace.trace.packet
    bodies = [b.body for p in packets for b in p.interned_data.log_message_body]
    assert bodies.count("same text") == 1
    assert len([b for b in bodies if b.startswith("tick")]) == 4
    locations = [loc.line_number for p in packets for loc in p.interned_data.source_locations]
    assert len(locations) == len(set(locations)) == 2
    logs = [e.log.body for e in trace.events if e.log is not None]
    assert logs == [x for i in range(4) for x in ("same text", f"tick {i}")]


def test_an_exception_is_in_the_body(record: Recorder, logger: logging.Logger) -> None:
    def body() -> None:
        try:
            raise ValueError("bad value")
        except ValueError:
            logger.exception("while parsing")

    trace = record(body)
    [log] = [e.log for e in trace.events if e.log is not None]
    assert log.body.startswith("while parsing\nTraceback")
    assert "ValueError: bad value" in log.body
    assert log.prio == ERROR


def test_each_thread_logs_on_its_own_track(record: Recorder, logger: logging.Logger) -> None:
    def body() -> None:
        thread = threading.Thread(target=logger.warning, args=("from a thread",), name="worker")
        thread.start()
        thread.join()
        logger.warning("from main")

    trace = record(body)
    names = {e.log.body: trace.track_name(e.track) for e in trace.events if e.log is not None}
    assert names == {"from a thread": "worker", "from main": threading.current_thread().name}


def _line() -> int:
    import sys

    return sys._getframe(1).f_lineno
