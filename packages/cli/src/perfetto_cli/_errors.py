"""The root exception of perfetto_cli."""


class CliError(Exception):
    """Base class of every error raised by perfetto_cli."""
