"""What `@trace` makes of a function (not a coroutine function) in the pure build.

`_traced_function.TracedFunction` is the compiled build's; `_events.trace` picks one of them
once. Both write the same slices (`tests/test_traced_wrappers.py`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

from perfetto_client._categories import Category
from perfetto_client._track_event import slice_enter, slice_exit

__all__ = ["traced_wrapper"]

P = ParamSpec("P")
R = TypeVar("R")

_CO_VARARGS = 0x04
_CO_VARKEYWORDS = 0x08
_factories: dict[str, Callable[..., Any]] = {}
"""Wrapper factories by source (one compile per distinct signature)."""

_WRAPPER = """
def _perfetto_make(_perfetto_fn, _perfetto_cat, _perfetto_key, {defaults}):
    def traced({params}):
        if not _perfetto_cat.enabled:
            return _perfetto_fn({args})
        _perfetto_writers = slice_enter(_perfetto_cat, _perfetto_key)
        try:
            return _perfetto_fn({args})
        finally:
            slice_exit(_perfetto_writers)
    return traced
"""
_WRAPPER_GLOBALS = {"slice_enter": slice_enter, "slice_exit": slice_exit}


def traced_wrapper(fn: Callable[P, R], cat: Category, key: int) -> Callable[P, R]:
    """A function calling `fn` in a slice of event key `key` while a session records `cat`,
    carrying `fn`'s name, qualified name, doc and `__wrapped__`."""
    return functools.update_wrapper(_wrapper(fn, cat, key), fn)


def _wrapper(fn: Callable[P, R], cat: Category, key: int) -> Callable[P, R]:
    """The pure build's traced wrapper of `fn`: a Python function with `fn`'s own parameters
    when it is a plain Python function (a call without *args/**kwargs packing costs about a
    third; a class's `__call__`, what the compiled build uses, costs pure Python more)."""
    params, args, default_values = _signature(fn) or ("*args, **kwargs", "*args, **kwargs", [])
    source = _WRAPPER.format(
        defaults=", ".join(f"_perfetto_d{i}" for i in range(len(default_values))),
        params=params,
        args=args,
    )
    factory = _factories.get(source)
    if factory is None:
        namespace: dict[str, Any] = {}
        exec(compile(source, "<perfetto_client.trace>", "exec"), _WRAPPER_GLOBALS, namespace)
        factory = _factories[source] = namespace["_perfetto_make"]
    traced: Callable[P, R] = factory(fn, cat, key, *default_values)
    return traced


def _signature(fn: Callable[..., Any]) -> tuple[str, str, list[object]] | None:
    """(parameters, call arguments, default values) repeating `fn`'s signature, or None
    when `fn` is not a plain Python function."""
    code = getattr(fn, "__code__", None)
    if code is None or not isinstance(getattr(fn, "__defaults__", ()), tuple | None):
        return None
    names = code.co_varnames
    positional = code.co_argcount
    kwonly = code.co_kwonlyargcount
    if any(n.startswith("_perfetto_") for n in names[: positional + kwonly + 2]):
        return None
    defaults = fn.__defaults__ or ()
    kwdefaults = fn.__kwdefaults__ or {}
    params: list[str] = []
    args: list[str] = []
    default_values: list[object] = []
    first_default = positional - len(defaults)
    for i, name in enumerate(names[:positional]):
        if i >= first_default:
            params.append(f"{name}=_perfetto_d{len(default_values)}")
            default_values.append(defaults[i - first_default])
        else:
            params.append(name)
        if i == code.co_posonlyargcount - 1:
            params.append("/")
        args.append(name)
    index = positional + kwonly
    if code.co_flags & _CO_VARARGS:
        params.append(f"*{names[index]}")
        args.append(f"*{names[index]}")
        index += 1
    elif kwonly:
        params.append("*")
    for name in names[positional : positional + kwonly]:
        if name in kwdefaults:
            params.append(f"{name}=_perfetto_d{len(default_values)}")
            default_values.append(kwdefaults[name])
        else:
            params.append(name)
        args.append(f"{name}={name}")
    if code.co_flags & _CO_VARKEYWORDS:
        params.append(f"**{names[index]}")
        args.append(f"**{names[index]}")
    return ", ".join(params), ", ".join(args), default_values
