"""The `perfetto` command-line client (upstream's flags, configs, messages and exit codes)."""

from typing import TYPE_CHECKING, Any

from perfetto_cmd._errors import CliError
from perfetto_cmd._main import main

__all__ = ["CliError", "__version__", "activate_triggers", "main", "trigger_perfetto_main"]


if TYPE_CHECKING:
    from perfetto_cmd._trigger import activate_triggers, trigger_perfetto_main

    __version__: str
else:

    def __getattr__(name: str) -> Any:
        """Loads the trigger producer (the service's IPC client) and the version on first use."""
        if name in ("activate_triggers", "trigger_perfetto_main"):
            from perfetto_cmd import _trigger

            value = getattr(_trigger, name)
        elif name == "__version__":
            from importlib.metadata import version

            value = version("perfetto-cmd")
        else:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        globals()[name] = value
        return value
