"""Code run inside an in-process session, and the trace it wrote, decoded."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from perfetto_client import Backend, Tracing
from trace_model import TraceModel

Recorder = Callable[..., TraceModel]


def record_in_process(body: Callable[[], Any], config: Any = None) -> TraceModel:
    """Runs `body` inside an in-process session and returns the decoded trace."""
    Tracing.initialize(Backend.IN_PROCESS)
    session = Tracing.new_trace(Backend.IN_PROCESS)
    try:
        session.setup(config)
        session.start()
        try:
            body()
        finally:
            session.stop()
        data = session.read_trace()
    finally:
        session.close()
    return TraceModel(data)
