"""The versions the conformance kit combines.

`PERFETTO_CONFORMANCE_VERSIONS="NAME=PYTHON,NAME=PYTHON..."` names the interpreters of the
environments where each version is installed (`nox -s compat` sets it); without it the kit
runs this environment against itself. Every test taking `combination` runs once for each
pair of versions (clients, traced): the producers and the consumer of the first against the
`traced` of the second.
"""

from __future__ import annotations

import itertools

import pytest
from kit import versions


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "combination" in metafunc.fixturenames:
        combos = list(itertools.product(versions(), repeat=2))
        ids = [f"clients-{c.name}.traced-{t.name}" for c, t in combos]
        metafunc.parametrize("combination", combos, ids=ids, scope="module")
