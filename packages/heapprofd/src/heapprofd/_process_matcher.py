"""Which processes a HeapprofdConfig targets (upstream's pid and cmdline glob matching)."""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Sequence

__all__ = [
    "PROFILING_SIGNAL",
    "cmdline_matches",
    "has_profiling_handler",
    "list_pids",
    "read_cmdline",
]

PROFILING_SIGNAL = 32 + 4
"""Upstream's heapprofd signal (bionic's __SIGRTMIN + 4); clients install a handler for it."""


def read_cmdline(pid: int) -> list[str] | None:
    """The arguments of `pid` (first 511 bytes, as upstream reads), None when it is gone."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read(511)
    except OSError:
        return None
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def _python_program(args: Sequence[str]) -> list[str]:
    """The script or `-m` module a Python interpreter runs (and, for `heapprofd run`, its
    program too)."""
    rest = list(args)
    while rest:
        arg = rest.pop(0)
        if arg == "-c":
            return []
        if arg == "-m":
            if not rest:
                return []
            module = rest.pop(0)
            if module == "heapprofd" and rest[:1] == ["run"]:
                rest = rest[1:]
                if rest[:1] == ["--"]:
                    rest = rest[1:]
                return [module, *_program(rest)]
            return [module]
        if arg in ("-W", "-X"):
            rest = rest[1:]
            continue
        if not arg.startswith("-"):
            return [arg]
    return []


def _program(args: list[str]) -> list[str]:
    if args[:1] == ["-m"]:
        return args[1:2]
    return args[:1]


def _names(argv: Sequence[str]) -> list[tuple[str, str]]:
    """(full, basename) pairs to match: argv0 and, for Python, the program it runs."""
    if not argv:
        return []
    names = [argv[0]]
    base = os.path.basename(argv[0])
    if base.startswith("python"):
        names += _python_program(argv[1:])
    elif base == "heapprofd" and argv[1:2] == ["run"]:
        rest = argv[2:]
        names += _program(list(rest[1:] if rest[:1] == ["--"] else rest))
    return [(name, name.rsplit("/", 1)[-1]) for name in names]


def cmdline_matches(patterns: Sequence[str], argv: Sequence[str]) -> bool:
    """Upstream's rule: a pattern starting with '/' matches the full argv0, any other its
    basename (fnmatch globs). Our extension: for a Python interpreter the script path (or the
    `-m` module) is tried the same way."""
    for full, base in _names(argv):
        for pattern in patterns:
            target = full if pattern.startswith("/") else base
            if fnmatch.fnmatchcase(target, pattern):
                return True
    return False


def list_pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def has_profiling_handler(pid: int) -> bool:
    """True when `pid` catches the profiling signal (our client is loaded): only those are
    signalled, since the signal's default action would kill the process."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("SigCgt:"):
                    mask = int(line.split()[1], 16)
                    return bool(mask >> (PROFILING_SIGNAL - 1) & 1)
    except (OSError, ValueError):
        return False
    return False
