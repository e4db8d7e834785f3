"""Every package's tests run in one pytest session from the root; what they share lives once,
in perfetto_testing (testing/)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from perfetto_testing import SLOW_TIMEOUT

ROOT = Path(__file__).resolve().parent.parent
TEST_DIRS = [
    ROOT / "tests",
    ROOT / "tests" / "conformance",
    ROOT / "protos" / "tests",
    *sorted(ROOT.glob("packages/*/tests")),
]
# Run by the Python of an earlier version's environment (`nox -s compat`), where perfetto_testing
# is not installed: it keeps its own limit.
OWN_LIMITS = {ROOT / "tests" / "conformance" / "agent.py"}


def _modules() -> list[Path]:
    return [p for d in TEST_DIRS for p in sorted(d.glob("*.py")) if p.name != "conftest.py"]


def test_test_module_names_are_unique_across_the_tree() -> None:
    places: dict[str, list[str]] = {}
    for path in _modules():
        places.setdefault(path.stem, []).append(str(path.relative_to(ROOT)))
    assert len(places) > 100, "too few test modules found: the walk is wrong"
    assert {name: where for name, where in places.items() if len(where) > 1} == {}


def test_limits_and_waits_come_from_perfetto_testing() -> None:
    own = re.compile(r"^(TIMEOUT\s*=|def (wait_for|wait_until)\b)", re.M)
    defined = [
        str(path.relative_to(ROOT))
        for path in _modules()
        if path not in OWN_LIMITS and own.search(path.read_text(encoding="utf-8"))
    ]
    assert defined == []


def test_pytest_from_the_root_collects_every_suite() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:randomly"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=SLOW_TIMEOUT,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    collected = {line.split("::")[0] for line in result.stdout.splitlines() if "::" in line}
    expected = {str(path.relative_to(ROOT)) for path in _modules() if path.name.startswith("test_")}
    assert expected - collected == set()
