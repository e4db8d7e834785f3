"""The root exception of perfetto_cmd."""


class CliError(Exception):
    """Base class of every error raised by perfetto_cmd."""
