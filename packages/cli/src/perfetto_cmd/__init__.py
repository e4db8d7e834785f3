"""The perfetto command-line client."""

from importlib.metadata import version as _version

from perfetto_cmd._errors import CliError

__version__: str = _version("perfetto-cmd")

__all__ = ["CliError", "__version__"]
