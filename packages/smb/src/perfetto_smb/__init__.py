"""Perfetto's shared memory buffer: ABI, arbiter, TraceWriter and reader."""

from importlib.metadata import version as _version

from perfetto_smb._errors import SmbError

__version__: str = _version("perfetto-smb")

__all__ = ["SmbError", "__version__"]
