"""A test run as a Perfetto trace: `pytest --perfetto OUT.pftrace` (perfetto-client's plugin).

python examples/pytest_run.py out.pftrace     runs pytest on the tests below, as
    pytest --perfetto out.pftrace examples/pytest_run.py
would: each test is a slice named by its node id, with `setup`, `call` and `teardown` inside
and its `outcome` (here all passed). Add `--perfetto-calls` to record every Python call too.
"""

import subprocess
import sys


def word_count(text: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for word in text.split():
        counts[word] = counts.get(word, 0) + 1
    return counts


def test_counts_words() -> None:
    assert word_count("a b a") == {"a": 2, "b": 1}


def test_empty_text_has_no_words() -> None:
    assert word_count("") == {}


if __name__ == "__main__":
    output = sys.argv[1] if len(sys.argv) > 1 else "run.pftrace"
    pytest = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider"]
    sys.exit(subprocess.call([*pytest, "--perfetto", output, __file__]))
