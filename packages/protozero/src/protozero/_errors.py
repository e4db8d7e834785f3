"""The root exception of protozero."""


class ProtozeroError(Exception):
    """Base class of every error raised by protozero."""
