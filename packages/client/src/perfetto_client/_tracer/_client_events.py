"""The program's own track events (the perfetto_client API) in perfetto-trace's trace.

Nothing happens unless the program calls `Tracing.initialize`: then an in-process session
of ours (every category enabled) streams the program's events into a part file that is
appended to the trace when the recording stops.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

from perfetto_client import _tracing
from perfetto_client._tracer._engine import Engine

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


class ClientEvents:
    """Starts a session when the program initializes tracing; `finish` returns its file."""

    def __init__(self, part: str, engine: Engine) -> None:
        self.part = part
        self._engine = engine
        self._session: Any = None
        self._original = _tracing.Tracing.__dict__["initialize"]

    def enable(self) -> None:
        """From now on, the program's `Tracing.initialize` also starts our session."""
        original = self._original.__func__

        def initialize(backends: Any = _tracing.Backend.IN_PROCESS, **options: Any) -> None:
            # The service's thread is ours, not the program's: it is not recorded.
            with self._engine.threads_not_recorded():
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
        self._original.__func__(_tracing.Backend.IN_PROCESS)
        session = _tracing.Tracing.new_trace(_tracing.Backend.IN_PROCESS)
        session.setup(_CONFIG, output=self.part)
        session.start()
        self._session = session

    def finish(self) -> str | None:
        """Stops our session; the path of its trace, if the program initialized tracing."""
        _tracing.Tracing.initialize = self._original  # type: ignore[method-assign]
        session, self._session = self._session, None
        if session is None:
            return None
        session.stop()
        with contextlib.suppress(Exception):
            session.close()
        return self.part if os.path.exists(self.part) else None
