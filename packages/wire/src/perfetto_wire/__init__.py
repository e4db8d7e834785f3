"""Perfetto's IPC protocol over UNIX and TCP sockets."""

from importlib.metadata import version as _version

from perfetto_wire._errors import WireError

__version__: str = _version("perfetto-wire")

__all__ = ["WireError", "__version__"]
