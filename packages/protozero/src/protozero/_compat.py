"""`mypyc_attr` when mypy_extensions is installed (compiled builds), a no-op otherwise."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

try:
    from mypy_extensions import mypyc_attr
except ImportError:  # pure-Python installs do not need mypy's runtime helpers

    def mypyc_attr(*attrs: str, **kwattrs: object) -> Callable[[T], T]:
        """Returns the class unchanged: only the mypyc compiler reads these attributes."""
        del attrs, kwattrs

        def identity(cls: T) -> T:
            return cls

        return identity


__all__ = ["mypyc_attr"]
