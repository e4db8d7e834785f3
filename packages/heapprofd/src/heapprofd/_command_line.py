"""What `heapprofd` and `heap_profile` share on their command lines."""

from __future__ import annotations

import argparse
from importlib.metadata import version
from typing import NoReturn

__all__ = ["Parser", "version_line"]


def version_line(command: str) -> str:
    """What `COMMAND --version` prints: `COMMAND (perfetto-py) X.Y.Z`."""
    return f"{command} (perfetto-py) {version('perfetto-heapprofd')}"


class Parser(argparse.ArgumentParser):
    """An argument parser that answers `--version` and reports a mistake in one line (status 1)."""

    def __init__(self, prog: str, description: str) -> None:
        super().__init__(prog=prog, description=description)
        self.add_argument("--version", action="version", version=version_line(prog))

    def error(self, message: str) -> NoReturn:
        self.exit(1, f"{self.prog}: {message} (see {self.prog} --help)\n")
