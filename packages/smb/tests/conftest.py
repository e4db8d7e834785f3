"""Makes the helper modules next to the tests importable (also in spawned children)."""

import sys
from pathlib import Path

_TESTS = str(Path(__file__).parent)
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)
