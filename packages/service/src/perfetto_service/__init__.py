"""The Perfetto tracing service (traced) and the internal producer/consumer API."""

from importlib.metadata import version as _version

from perfetto_service._errors import ServiceError

__version__: str = _version("perfetto-service")

__all__ = ["ServiceError", "__version__"]
