"""The root exception of perfetto_probes."""


class ProbesError(Exception):
    """Base class of every error raised by perfetto_probes."""
