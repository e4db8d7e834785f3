"""Trace files read with upstream's schema, the tests' oracle."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def read_upstream_trace(path: Path) -> Any:
    """The trace at `path`, parsed with upstream's schema (`perfetto.protos.Trace` of the
    `perfetto` distribution, through perfetto_protos.upstream)."""
    # Imported here: protozero's tests, below perfetto_protos, use this package too.
    from perfetto_protos.upstream import parse_upstream_trace

    return parse_upstream_trace(path.read_bytes())
