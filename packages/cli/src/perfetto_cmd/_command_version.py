"""The line every command of this package prints for `--version`."""

from __future__ import annotations

__all__ = ["version_line"]


def version_line(command: str) -> str:
    """What `COMMAND --version` prints: `COMMAND (perfetto-py) X.Y.Z`."""
    from importlib.metadata import version  # costs as much as a command's other imports

    return f"{command} (perfetto-py) {version('perfetto-cmd')}"
