"""The package's public surface: what a producer or a service needs, and nothing else."""

from __future__ import annotations

import perfetto_smb
import pytest


def test_every_exported_name_resolves() -> None:
    for name in perfetto_smb.__all__:
        assert getattr(perfetto_smb, name) is not None, name


@pytest.mark.parametrize(
    "name",
    ["pack_chunk_header", "read_fragment_size", "WriterIdAllocator", "Patch", "DEFAULT_SHM_SIZE"],
)
def test_header_helpers_and_sizes_stay_private(name: str) -> None:
    assert name not in perfetto_smb.__all__
    assert not hasattr(perfetto_smb, name)
