"""What `heapprofd` and `heap_profile` share on their command lines."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from typing import Any, NoReturn

__all__ = ["Parser", "python_program_problem", "version_line"]


def version_line(command: str) -> str:
    """What `COMMAND --version` prints: `COMMAND (perfetto-py) X.Y.Z`."""
    from importlib.metadata import version  # costs as much as a command's other imports

    return f"{command} (perfetto-py) {version('perfetto-heapprofd')}"


class _Version(argparse.Action):
    """`--version`: prints `version_line` (the metadata is read only then) and exits 0."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help="print the version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        print(version_line(parser.prog))
        parser.exit(0)


class Parser(argparse.ArgumentParser):
    """An argument parser that answers `--version` and reports a mistake in one line (status 1)."""

    def __init__(self, prog: str, description: str) -> None:
        super().__init__(prog=prog, description=description)
        self.add_argument("--version", action=_Version)

    def error(self, message: str) -> NoReturn:
        self.exit(1, f"{self.prog}: {message} (see {self.prog} --help)\n")


def python_program_problem(program: Sequence[str]) -> str | None:
    """Why `python PROGRAM` would fail before running anything (`script.py args` or `-m module
    args`), in Python's words; None when it can start. A directory runs its `__main__.py`."""
    if program[0] == "-m":
        return None if len(program) > 1 and program[1] else "-m needs a module name"
    script = program[0]
    if not os.path.exists(script):
        return f"no such file: {script}"
    if os.path.isdir(script):
        if os.path.isfile(os.path.join(script, "__main__.py")):
            return None
        return f"can't find '__main__' module in '{script}'"
    if not os.access(script, os.R_OK):
        return f"cannot read {script}"
    return None
