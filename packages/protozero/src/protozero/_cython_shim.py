"""Stands in for the `cython` module where Cython is not installed (a pure install).

Modules compiled with Cython read `cython.compiled`; when they run as plain Python without
Cython installed they import this module under that name instead.
"""

from collections.abc import Callable
from typing import Final, TypeVar

F = TypeVar("F", bound=Callable[..., object])

compiled: Final = False
Py_ssize_t: Final = int


def locals(**types: object) -> Callable[[F], F]:
    """Cython's `@cython.locals` (C types of a function's locals): does nothing here."""
    del types
    return lambda function: function
