"""The package's public surface: what a user of protozero needs, and nothing else."""

from __future__ import annotations

import protozero
import pytest


def test_every_exported_name_resolves() -> None:
    for name in protozero.__all__:
        assert getattr(protozero, name) is not None, name


@pytest.mark.parametrize(
    "name",
    ["SHORT_VARINTS", "VARINT_PAIRS", "SUSPENDED_WRITER", "ScatteredHeapBuffer", "make_tag"],
)
def test_internals_of_generated_code_and_tests_stay_private(name: str) -> None:
    assert name not in protozero.__all__
    assert not hasattr(protozero, name)
