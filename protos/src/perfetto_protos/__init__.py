"""Perfetto's protos: generated protobuf messages and ProtoZero writers."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from protozero import _native

from perfetto_protos._errors import ProtosError

# The hot ProtoZero writers are compiled (docs/native.md); their compiled build loads only
# with protozero's. No `_native.report()`: it would import every compiled writer here.
_native.select_build(__name__)

if TYPE_CHECKING:
    __version__: str

__all__ = ["ProtosError", "__version__"]

if not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        if name != "__version__":
            raise AttributeError(f"module 'perfetto_protos' has no attribute {name!r}")
        from importlib.metadata import version

        globals()["__version__"] = value = version("perfetto-protos")
        return value
