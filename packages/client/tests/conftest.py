"""Fixtures: a recorder that runs code inside an in-process session and decodes the trace."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from perfetto_client import Backend, Tracing
from trace_model import TraceModel
from tracer_support import build_in_place

Recorder = Callable[..., TraceModel]


def pytest_sessionstart(session: pytest.Session) -> None:
    if not hasattr(session.config, "workerinput"):  # xdist's workers: built by the controller
        build_in_place()
    from protozero import _native

    error = _native.expectation_error("perfetto_client")
    if error is not None:
        pytest.exit(f"perfetto_client: {error}", returncode=1)


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


@pytest.fixture
def record() -> Recorder:
    """`record(body, config=None)`: the trace of `body` run in an in-process session."""
    return record_in_process
