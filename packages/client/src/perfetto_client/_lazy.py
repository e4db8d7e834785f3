"""A module's names loaded from other modules on first use (the body of its `__getattr__`)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Mapping
from typing import Any

__all__ = ["load"]


def load(module_name: str, exports: Mapping[str, str], name: str) -> Any:
    """`name` of module `module_name`, taken from the module `exports` maps it to and kept in
    `module_name` from then on; AttributeError, as Python words it, for any other name."""
    source = exports.get(name)
    if source is None:
        raise AttributeError(f"module {module_name!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(source), name)
    setattr(sys.modules[module_name], name, value)
    return value
