"""The root exception of perfetto_service."""


class ServiceError(Exception):
    """Base class of every error raised by perfetto_service."""
