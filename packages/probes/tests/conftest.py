"""Checks which build loaded."""

import pytest


def pytest_sessionstart(session: pytest.Session) -> None:
    """Stops the run if the build that loaded is not the one the environment asks for."""
    del session
    from protozero import _native

    error = _native.expectation_error("perfetto_probes")
    if error is not None:
        pytest.exit(f"perfetto_probes: {error}", returncode=1)
