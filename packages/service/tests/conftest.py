"""Makes the helper module next to the tests importable; checks which build loaded."""

import sys
from pathlib import Path

import pytest

_TESTS = str(Path(__file__).parent)
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)


def pytest_sessionstart(session: pytest.Session) -> None:
    """Stops the run if the build that loaded is not the one the environment asks for."""
    del session
    from protozero import _native

    error = _native.expectation_error("perfetto_service")
    if error is not None:
        pytest.exit(f"perfetto_service: {error}", returncode=1)
