"""Makes the helper modules next to the tests importable (also in spawned children)."""

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

    error = _native.expectation_error("perfetto_smb")
    if error is not None:
        pytest.exit(f"perfetto_smb: {error}", returncode=1)
