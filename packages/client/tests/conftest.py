"""Fixtures: a recorder that runs code inside an in-process session and decodes the trace."""

from __future__ import annotations

import pytest
from in_process_recording import Recorder, record_in_process
from tracer_support import build_in_place


def pytest_sessionstart(session: pytest.Session) -> None:
    if not hasattr(session.config, "workerinput"):  # xdist's workers: built by the controller
        build_in_place()
    from protozero import _native

    error = _native.expectation_error("perfetto_client")
    if error is not None:
        pytest.exit(f"perfetto_client: {error}", returncode=1)


@pytest.fixture
def record() -> Recorder:
    """`record(body, config=None)`: the trace of `body` run in an in-process session."""
    return record_in_process
