"""Perfetto's protos: generated protobuf messages and ProtoZero writers."""

from importlib.metadata import version as _version

from perfetto_protos._errors import ProtosError

__version__: str = _version("perfetto-protos")

__all__ = ["ProtosError", "__version__"]
