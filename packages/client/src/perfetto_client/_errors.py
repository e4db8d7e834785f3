"""The root exception of perfetto_client."""


class TracingError(Exception):
    """Base class of every error raised by perfetto_client."""
