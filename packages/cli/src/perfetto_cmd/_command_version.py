"""The line every command of this package prints for `--version`."""

from __future__ import annotations

from importlib.metadata import version

__all__ = ["version_line"]


def version_line(command: str) -> str:
    """What `COMMAND --version` prints: `COMMAND (perfetto-py) X.Y.Z`."""
    return f"{command} (perfetto-py) {version('perfetto-cmd')}"
