"""What `@trace` makes of a function (not a coroutine function) in the compiled build.

`_traced_wrapper` is the pure build's; `_events.trace` picks one of them once. Compiled
(`_traced_function.pxd`), each call is a vectorcall that begins and ends its slice in C.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable
from typing import Any

try:
    import cython
except ImportError:  # installed without Cython: runs as pure Python
    from protozero import _cython_shim as cython

from perfetto_client._categories import Category

if cython.compiled:
    from cython.cimports.perfetto_client._vectorcall import pc_use_vectorcall, pc_vectorcall
else:  # compiled, _traced_function.pxd cimports them from _track_event
    from perfetto_client._track_event import slice_enter, slice_exit

__all__ = ["COMPILED", "TracedFunction"]

COMPILED: bool = cython.compiled
"""Whether this module runs compiled (`@trace` then makes functions `TracedFunction`s)."""


class TracedFunction:
    """What `@trace` makes of a function (not a coroutine function) in the compiled build:
    each call is a slice of event key `key` in `cat` while a session records `cat`.

    It carries the function's name, qualified name, doc and `__wrapped__`
    (`functools.update_wrapper`), binds as a method and pickles by name, as the function.
    """

    def __init__(self, fn: Callable[..., Any], cat: Category, key: int) -> None:
        self._fn = fn
        self._cat = cat
        self._key = key
        functools.update_wrapper(self, fn)
        if cython.compiled:
            self._vectorcall = cython.cast(cython.p_void, _traced_vectorcall)
            pc_use_vectorcall(
                TracedFunction,
                cython.cast(cython.p_char, cython.address(self._vectorcall))
                - cython.cast(cython.p_char, cython.cast(cython.p_void, self)),
            )

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

    def __reduce__(self) -> str:
        name: str = self.__qualname__  # type: ignore[attr-defined]
        return name

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
