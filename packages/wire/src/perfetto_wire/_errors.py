"""The root exception of perfetto_wire."""


class WireError(Exception):
    """Base class of every error raised by perfetto_wire."""
