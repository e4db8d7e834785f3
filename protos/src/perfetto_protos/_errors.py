"""The root exception of perfetto_protos."""


class ProtosError(Exception):
    """Base class of every error raised by perfetto_protos."""
