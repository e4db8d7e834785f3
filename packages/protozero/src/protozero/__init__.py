"""Append-only zero-copy protobuf writer, decoder and code generator."""

from importlib.metadata import version as _version

from protozero._errors import ProtozeroError

__version__: str = _version("perfetto-protozero")

__all__ = ["ProtozeroError", "__version__"]
