"""The perfetto command-line client."""

from importlib.metadata import version as _version

from perfetto_cli._errors import CliError

__version__: str = _version("perfetto-cli")

__all__ = ["CliError", "__version__"]
