"""The root exception of perfetto_cmd, and how a message reaches the user."""

import sys


class CliError(Exception):
    """Base class of every error raised by perfetto_cmd."""


def log(message: str) -> None:
    """One line on stderr."""
    sys.stderr.write(message + "\n")
    sys.stderr.flush()
