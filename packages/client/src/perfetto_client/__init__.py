"""The Perfetto client library for Python programs."""

from importlib.metadata import version as _version

from perfetto_client._errors import TracingError

__version__: str = _version("perfetto-client")

__all__ = ["TracingError", "__version__"]
