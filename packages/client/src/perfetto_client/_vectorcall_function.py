"""The compiled build's stand-in for a function whose calls go straight to C.

`VectorcallFunction` wraps a function and carries its name, qualified name, doc and
`__wrapped__`, pickles by name and shows the function's repr; compiled
(`_vectorcall_function.pxd`), each subclass names the C vectorcall its instances' calls go to
(`_use_vectorcall`), with no argument tuple or dict. `_events.InstantFunction`,
`_events.CounterFunction` and `_traced_function.TracedFunction` are its subclasses.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

try:
    import cython
except ImportError:  # installed without Cython: runs as pure Python
    from protozero import _cython_shim as cython

if cython.compiled:
    from cython.cimports.perfetto_client._vectorcall import pc_use_vectorcall

__all__ = ["VectorcallFunction"]


class VectorcallFunction:
    """Function `fn`'s stand-in (see the module's docstring); as the built-in function it
    stands for, it does not bind as a method (a subclass may)."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self._fn = fn
        functools.update_wrapper(self, fn)

    def _use_vectorcall(self, vectorcall: Any) -> None:
        """Makes calls of this object's class go to the C vectorcall `vectorcall` (compiled
        build only)."""
        self._vectorcall = vectorcall
        pc_use_vectorcall(
            type(self),
            cython.cast(cython.p_char, cython.address(self._vectorcall))
            - cython.cast(cython.p_char, cython.cast(cython.p_void, self)),
        )

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._fn(*args, **kwargs)

    def __get__(self, instance: object, owner: object) -> Any:
        """Itself (a method descriptor that does not bind: `help` documents it as a routine)."""
        return self

    def __reduce__(self) -> str:
        name: str = self.__qualname__  # type: ignore[attr-defined]
        return name

    def __repr__(self) -> str:
        return repr(self._fn)
