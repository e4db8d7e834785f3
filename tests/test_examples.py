"""Every example runs, and every Python block of the documentation is part of an example.

Examples take an optional output path as their first argument and write nothing else into
the working directory.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

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
    "packages/protozero/README.md",
    "packages/smb/README.md",
}
TIMEOUT = 300  # generous: a loaded 2-core machine; an example takes seconds
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)


def _significant_lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]


def _contains(haystack: list[str], needle: list[str]) -> bool:
    return any(haystack[i : i + len(needle)] == needle for i in range(len(haystack)))


@pytest.fixture(scope="module")
def built_extensions() -> None:
    """Builds the stale compiled modules in place (examples use heapprofd's compiled client)."""
    build_native = [sys.executable, str(ROOT / "tools" / "build_native.py")]
    subprocess.run(build_native, check=True, timeout=TIMEOUT)


@pytest.mark.usefixtures("built_extensions")
@pytest.mark.parametrize("example", EXAMPLES, ids=[path.name for path in EXAMPLES])
def test_example_runs(example: Path, tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(example), str(tmp_path / "out.pftrace")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) in ([], ["out.pftrace"])


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
