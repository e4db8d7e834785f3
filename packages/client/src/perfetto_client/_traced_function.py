"""What `@trace` makes of a function (not a coroutine function) in the compiled build.

`_traced_wrapper` is the pure build's; `_events.trace` picks one of them once. Compiled
(`_traced_function.pxd`), each call is a vectorcall that begins and ends its slice in C.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

try:
    import cython
except ImportError:  # installed without Cython: runs as pure Python
    from protozero import _cython_shim as cython

from perfetto_client._categories import Category
from perfetto_client._vectorcall_function import VectorcallFunction

if cython.compiled:
    from cython.cimports.perfetto_client._vectorcall import pc_vectorcall
else:  # compiled, _traced_function.pxd cimports them from _track_event
    from perfetto_client._track_event import slice_enter, slice_exit

__all__ = ["COMPILED", "TracedFunction"]

COMPILED: bool = cython.compiled
"""Whether this module runs compiled (`@trace` then makes functions `TracedFunction`s)."""


class TracedFunction(VectorcallFunction):
    """What `@trace` makes of a function (not a coroutine function) in the compiled build:
    each call is a slice of event key `key` in `cat` while a session records `cat`.

    It carries the function's name, qualified name, doc and `__wrapped__`, binds as a method
    and pickles by name, as the function (a `VectorcallFunction` that binds).
    """

    def __init__(self, fn: Callable[..., Any], cat: Category, key: int) -> None:
        super().__init__(fn)
        self._cat = cat
        self._key = key
        if cython.compiled:
            self._use_vectorcall(cython.cast(cython.p_void, _traced_vectorcall))

    @cython.locals(writers=tuple)  # type: ignore[untyped-decorator]
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not self._cat.enabled:
            return self._fn(*args, **kwargs)
        writers = slice_enter(self._cat, self._key)
        try:
            return self._fn(*args, **kwargs)
        finally:
            slice_exit(writers)

    def __get__(self, instance: object, owner: object) -> Any:
        if instance is None:
            return self
        return types.MethodType(self, instance)

    def __repr__(self) -> str:
        return f"<traced {self._fn!r}>"


def _traced_vectorcall(self: TracedFunction, args: Any, nargsf: int, kwnames: Any) -> Any:
    """`TracedFunction.__call__` as the compiled build's vectorcall (arguments passed on as
    they came, no tuple or dict)."""
    if not self._cat.enabled:
        return pc_vectorcall(self._fn, args, nargsf, kwnames)
    writers = slice_enter(self._cat, self._key)
    try:
        return pc_vectorcall(self._fn, args, nargsf, kwnames)
    finally:
        slice_exit(writers)
