"""Every example runs, and every Python block of the documentation is part of an example.

Examples that record a trace take its path as their first argument and write it there (a
trace upstream's schema reads); no example writes anything else into the working directory.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from perfetto_protos.upstream import parse_upstream_trace
from perfetto_testing import SLOW_TIMEOUT

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))
DOCUMENTS = sorted(
    [
        *ROOT.glob("README.md"),
        *ROOT.glob("packages/*/README.md"),
        *ROOT.glob("protos/README.md"),
        *ROOT.glob("docs/*.md"),
    ]
)
# Documents whose Python blocks are not yet taken from examples/ (their owners convert them).
# strict: once a document complies, its entry must go.
NOT_YET = {
    "packages/smb/README.md",
}
# Examples of the protocol layers: they record no trace.
NO_TRACE = {"ipc_host_and_client.py", "protozero_messages.py"}
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)


def _significant_lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]


def _contains(haystack: list[str], needle: list[str]) -> bool:
    return any(haystack[i : i + len(needle)] == needle for i in range(len(haystack)))


# One worker builds the tree in place (the fixture), the others would build it beside it.
pytestmark = pytest.mark.xdist_group("builds the tree in place")


@pytest.fixture(scope="module")
def built_extensions() -> None:
    """Builds the stale compiled modules in place (examples use heapprofd's compiled client)."""
    build_native = [sys.executable, str(ROOT / "tools" / "build_native.py")]
    subprocess.run(build_native, check=True, timeout=SLOW_TIMEOUT)


@pytest.mark.usefixtures("built_extensions")
@pytest.mark.parametrize("example", EXAMPLES, ids=[path.name for path in EXAMPLES])
def test_example_runs(example: Path, tmp_path: Path) -> None:
    result = _run_example(example, tmp_path)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    if example.name in NO_TRACE:
        assert sorted(p.name for p in tmp_path.iterdir()) == []
        return
    assert sorted(p.name for p in tmp_path.iterdir()) == ["given.pftrace"]
    trace: Any = parse_upstream_trace((tmp_path / "given.pftrace").read_bytes())
    assert len(trace.packet) > 0


def test_fib_shows_its_caught_exception(tmp_path: Path) -> None:
    if os.environ.get("PERFETTO_PY_PURE"):
        pytest.skip("the pure hook records no caught exceptions (as fib.py says)")
    result = _run_example(ROOT / "examples" / "fib.py", tmp_path)
    assert result.returncode == 0, result.stderr
    trace: Any = parse_upstream_trace((tmp_path / "given.pftrace").read_bytes())
    # Each buffer interns its names again: resolve instants within their own sequence's batch.
    instants = []
    names: dict[int, str] = {}
    for packet in trace.packet:
        if packet.sequence_flags & 1:  # SEQ_INCREMENTAL_STATE_CLEARED: a new buffer
            names = {}
        names.update({n.iid: n.name for n in packet.interned_data.event_names})
        if packet.track_event.type == packet.track_event.TYPE_INSTANT:
            instants.append(names.get(packet.track_event.name_iid, ""))
    # parse raised, parse_or_zero caught it; sys.monitoring (3.12+) names the type.
    expected = "exception ValueError" if sys.version_info >= (3, 12) else "exception"
    assert expected in instants


def _run_example(example: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(example), str(cwd / "given.pftrace")],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=SLOW_TIMEOUT,
        check=False,
    )


def _document_params() -> list[object]:
    params: list[object] = []
    for path in DOCUMENTS:
        name = path.relative_to(ROOT).as_posix()
        marks = [pytest.mark.xfail(strict=True, reason="not converted yet")]
        params.append(pytest.param(path, id=name, marks=marks if name in NOT_YET else []))
    return params


@pytest.mark.parametrize("document", _document_params())
def test_documentation_code_comes_from_examples(document: Path) -> None:
    examples = [_significant_lines(path.read_text()) for path in EXAMPLES]
    blocks = _BLOCK.findall(document.read_text())
    missing = [
        block
        for block in blocks
        if not any(_contains(lines, _significant_lines(block)) for lines in examples)
    ]
    assert missing == []
