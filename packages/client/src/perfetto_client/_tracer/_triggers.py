"""Snapshot triggers: the program's `Tracing.activate_triggers` dumps the flight recorder."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from perfetto_client import _tracing


class SnapshotTriggers:
    """While enabled, a trigger named in `names` calls `on_trigger(name)` once per activation.

    The triggers still reach the program's own tracing backends (and `traced`) as before.
    """

    def __init__(self, names: Sequence[str], on_trigger: Callable[[str], None]) -> None:
        self._names = frozenset(names)
        self._on_trigger = on_trigger
        self._original = _tracing.Tracing.__dict__["activate_triggers"]

    def enable(self) -> None:
        """Watches `Tracing.activate_triggers` from now on."""
        original = self._original.__func__

        def activate_triggers(names: Sequence[str], ttl_ms: int = 0) -> None:
            original(names, ttl_ms)
            for name in [names] if isinstance(names, str) else list(names):
                if name in self._names:
                    self._on_trigger(name)

        activate_triggers.__doc__ = original.__doc__
        _tracing.Tracing.activate_triggers = staticmethod(  # type: ignore[method-assign]
            activate_triggers
        )

    def disable(self) -> None:
        """Restores the library's own `Tracing.activate_triggers`."""
        _tracing.Tracing.activate_triggers = self._original  # type: ignore[method-assign]
