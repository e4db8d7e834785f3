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
    "read_cwd",
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


def _python_program(args: Sequence[str]) -> tuple[list[str], list[str]]:
    """What a Python interpreter runs, from the arguments after the interpreter: ([script]
    or ["-m", module], then the program's own arguments); ([], []) for `-c`, stdin or none.
    Short options may be grouped (`-Bu`) and a value attached (`-Wignore`, `-mhttp.server`),
    as Python reads them."""
    rest = list(args)
    while rest:
        arg = rest.pop(0)
        if arg == "--":
            return (rest[:1], rest[1:]) if rest else ([], [])
        if arg == "-":
            return [], []
        if not arg.startswith("-"):
            return [arg], rest
        if arg.startswith("--"):
            if arg == "--check-hash-based-pycs" and rest:
                rest.pop(0)
            continue
        for index, option in enumerate(arg[1:], start=2):
            if option in "cmWX":  # options with a value: the rest of the word, or the next
                value = arg[index:] or (rest.pop(0) if rest else "")
                if option == "c":
                    return [], []
                if option == "m":
                    return (["-m", value], rest) if value else ([], [])
                break
    return [], []


def _run_program(args: Sequence[str]) -> list[str]:
    """What `heapprofd run [--] ARGS` runs: [script] or ["-m", module]."""
    args = list(args[1:] if args[:1] == ["--"] else args)
    return args[:2] if args[:1] == ["-m"] else args[:1]


def _names(argv: Sequence[str]) -> list[tuple[str, bool]]:
    """What is matched, each with whether it is a script path: argv0, and for a Python
    interpreter the script or `-m` module it runs, and for `heapprofd run` (console script,
    `-m heapprofd` or argv0) the program it runs."""
    if not argv:
        return []
    names = [(argv[0], False)]
    program, rest = [argv[0]], list(argv[1:])
    if os.path.basename(argv[0]).startswith("python"):
        program, rest = _python_program(rest)
        names += _program_names(program)
    runs_heapprofd = program == ["-m", "heapprofd"] or (
        len(program) == 1 and os.path.basename(program[0]) == "heapprofd"
    )
    if runs_heapprofd and rest[:1] == ["run"]:
        names += _program_names(_run_program(rest[1:]))
    return names


def _program_names(program: list[str]) -> list[tuple[str, bool]]:
    return [(program[1], False)] if program[:1] == ["-m"] else [(name, True) for name in program]


def cmdline_matches(patterns: Sequence[str], argv: Sequence[str], cwd: str | None = None) -> bool:
    """Upstream's rule: a pattern starting with '/' matches the full argv0, any other its
    basename (fnmatch globs). Our extension: for a Python interpreter the script (or the `-m`
    module), and for `heapprofd run` the program it runs, are tried the same way; a relative
    script path is also tried joined to `cwd`, the process's working directory."""
    for name, is_script in _names(argv):
        fulls = [name]
        if is_script and cwd is not None and not name.startswith("/"):
            fulls.append(os.path.normpath(os.path.join(cwd, name)))
        base = [name.rsplit("/", 1)[-1]]
        for pattern in patterns:
            targets = fulls if pattern.startswith("/") else base
            if any(fnmatch.fnmatchcase(target, pattern) for target in targets):
                return True
    return False


def read_cwd(pid: int) -> str | None:
    """The working directory of `pid`, None when it cannot be read."""
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return None


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
