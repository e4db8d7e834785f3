"""The `perfetto` command-line client (upstream's flags, configs, messages and exit codes)."""

from importlib.metadata import version as _version

from perfetto_cmd._errors import CliError
from perfetto_cmd._main import main
from perfetto_cmd._trigger import activate_triggers, trigger_perfetto_main

__version__: str = _version("perfetto-cmd")

__all__ = ["CliError", "__version__", "activate_triggers", "main", "trigger_perfetto_main"]
