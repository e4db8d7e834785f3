"""The program's own track events (the perfetto_client API) in perfetto-trace's trace.

Nothing happens unless the program calls `Tracing.initialize`: then an in-process session
of ours (every category enabled) streams the program's events into a part file that is
appended to the trace when the recording stops.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import sys
from collections.abc import Callable
from typing import Any

from protozero import ProtoDecoder

from perfetto_client import _tracing
from perfetto_client._tracer._engine import Engine

_PACKET = 1  # Trace.packet
_TRACK_EVENT = 11  # TracePacket.track_event

_CONFIG: dict[str, Any] = {
    "buffers": [{"size_kb": 8192}],
    "data_sources": [
        {
            "config": {
                "name": "track_event",
                "track_event_config": {"enabled_categories": ["*"], "enabled_tags": ["*"]},
            }
        }
    ],
}


@dataclasses.dataclass
class ClientPart:
    """The program's own events, recorded into a file of their own."""

    path: str
    events: int
    """Its track events."""
    lost: str
    """What the session's buffer lost, said in one phrase ("" when nothing)."""


class ClientEvents:
    """Starts a session when the program initializes tracing; `finish` returns its file."""

    def __init__(self, part: str, engine: Engine) -> None:
        self.part = part
        self._engine = engine
        self._session: Any = None
        self._restore_logger: Callable[[], None] | None = None
        self._original = _tracing.Tracing.__dict__["initialize"]

    def enable(self) -> None:
        """From now on, the program's `Tracing.initialize` also starts our session."""
        original = self._original.__func__

        def initialize(backends: Any = _tracing.Backend.IN_PROCESS, **options: Any) -> None:
            # The service's thread is ours, not the program's: it is not recorded.
            with self._engine.threads_not_recorded():
                self._quiet_service()
                original(backends, **options)
                self._start()

        initialize.__doc__ = original.__doc__
        _tracing.Tracing.initialize = staticmethod(initialize)  # type: ignore[method-assign]

    def start_now(self) -> None:
        """Starts our session now, without waiting for the program to initialize tracing."""
        with self._engine.threads_not_recorded():
            self._start()

    def _start(self) -> None:
        if self._session is not None:
            return
        self._quiet_service()
        self._original.__func__(_tracing.Backend.IN_PROCESS)
        session = _tracing.Tracing.new_trace(_tracing.Backend.IN_PROCESS)
        session.setup(_CONFIG, output=self.part)
        session.start()
        self._session = session

    def _quiet_service(self) -> None:
        if self._restore_logger is None:
            self._restore_logger = _quiet_service()

    def finish(self) -> ClientPart | None:
        """Stops our session; its file, if the program initialized tracing. The service's
        logger is as before once the session is gone."""
        _tracing.Tracing.initialize = self._original  # type: ignore[method-assign]
        session, self._session = self._session, None
        try:
            if session is None:
                return None
            lost = ""
            try:
                lost = _losses(session.trace_stats())
            except Exception as exc:  # the service went away: what it held is not known
                lost = f"the program's own events: no statistics ({exc})"
            session.stop()
            with contextlib.suppress(Exception):
                session.close()
        finally:
            if self._restore_logger is not None:
                self._restore_logger()
                self._restore_logger = None
        if not os.path.exists(self.part):
            return None
        with open(self.part, "rb") as part:
            return ClientPart(self.part, _track_events(part.read()), lost)


def _quiet_service() -> Callable[[], None]:
    """The in-process service's log lines go to stderr from WARNING on, not into the
    program's own logging (a program that logs INFO would print the service's lines),
    until the returned function puts the logger back as it was."""
    service = logging.getLogger("perfetto_service")
    if not service.propagate:
        return lambda: None
    service.propagate = False
    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(logging.WARNING)
    handler.setFormatter(logging.Formatter("perfetto-trace: %(message)s"))
    service.addHandler(handler)

    def restore() -> None:
        service.removeHandler(handler)
        service.propagate = True

    return restore


def _losses(stats: Any) -> str:
    chunks = sum(b.chunks_overwritten + b.chunks_discarded for b in stats.buffer_stats)
    if not chunks:
        return ""
    return f"the program's own events: {chunks:,} chunks lost in a full buffer"


def _track_events(trace: bytes) -> int:
    count = 0
    for field in ProtoDecoder(trace):
        if field.id == _PACKET and any(f.id == _TRACK_EVENT for f in field.as_message()):
            count += 1
    return count
