"""Stands in for the `cython` module where Cython is not installed (a pure install).

Modules compiled with Cython read `cython.compiled`; when they run as plain Python without
Cython installed they import this module under that name instead.
"""

from typing import Final

compiled: Final = False
