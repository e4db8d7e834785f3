"""Which build of a package's compiled modules runs: compiled with Cython, or pure Python.

A module is compiled when a `.pxd` sits beside its `.py` (perfetto_build, the packages' build
backend, builds it).
Each package with compiled modules calls `select_build()` at the top of its `__init__` and
`report()` at the end:

- PERFETTO_PY_PURE=1 loads the `.py` modules even where compiled ones exist;
- a package whose `.pxd` files cimport another package that runs pure (e.g. protozero installed
  without a C compiler) loads its `.py` modules too: its compiled modules need the other
  package's compiled ones;
- a package whose compiled modules did not load says so once, on stderr (when
  PERFETTO_PY_PURE=1 asked for that, only under `python -X dev` or PERFETTO_PY_NATIVE_NOTICE=1);
- `expectation_error()` tells tests whether the build that loaded is the one
  PERFETTO_PY_EXPECT_COMPILED=1 or PERFETTO_PY_PURE=1 asked for;
- in a source checkout, a package whose compiled modules were built from other sources than
  the checkout's (the record perfetto_build writes beside them) refuses to import, in one line
  naming them and the command that rebuilds them (`refuse_stale()`; an installed wheel has no
  record and is not checked).

This module always runs as pure Python.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import os
import re
import sys
from collections.abc import Sequence
from types import ModuleType

PURE_ENV = "PERFETTO_PY_PURE"
NOTICE_ENV = "PERFETTO_PY_NATIVE_NOTICE"
EXPECT_COMPILED_ENV = "PERFETTO_PY_EXPECT_COMPILED"
EXTENSION_SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]
"""The running interpreter's compiled modules' suffix (`.cpython-312-x86_64-linux-gnu.so`)."""
RECORD = ".native-build" + EXTENSION_SUFFIX.removesuffix(".so")
"""The file, in a top-level package's directory, in which perfetto_build records the sources
each of its compiled modules was built from (by a build in place: a develop install or
`tools/build_native.py`)."""
REBUILD = "python3 tools/dev.py run python tools/build_native.py"


class _PureFinder:  # a sys.meta_path finder (importlib.abc would load importlib.resources)
    """Finds the `.py` source of modules in the registered packages, ignoring extensions."""

    def __init__(self) -> None:
        self.packages: set[str] = set()

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        parent, _, name = fullname.rpartition(".")
        if path is None or not any(
            parent == p or parent.startswith(p + ".") for p in self.packages
        ):
            return None
        for entry in path:
            source = os.path.join(entry, f"{name}.py")
            if os.path.isfile(source):
                return importlib.util.spec_from_file_location(fullname, source)
        return None


_finder = _PureFinder()
_reported: set[str] = set()
_pure_because: dict[str, str] = {}
"""Why a package runs pure although PERFETTO_PY_PURE=1 was not asked for."""

_CIMPORT = re.compile(r"^\s*(?:from\s+([\w.]+)\s+cimport|cimport\s+([\w.]+))", re.M)
"""A `.pxd` line that cimports a module (the same rule as perfetto_build's include path)."""


def pure_requested() -> bool:
    """Whether PERFETTO_PY_PURE=1 asks for the pure-Python build."""
    return os.environ.get(PURE_ENV) == "1"


def select_build(package: str) -> None:
    """Makes `package`'s submodules load as pure Python if they cannot or must not run compiled.

    That is when PERFETTO_PY_PURE=1 asks for it, or when `package` cimports from another
    package whose compiled modules did not load. Compiled modules built from other sources
    than a checkout's refuse to load (`refuse_stale()`).
    """
    if not pure_requested():
        refuse_stale(package)
        pure_dependencies = [dep for dep in cimported_packages(package) if _runs_pure(dep)]
        if not pure_dependencies:
            return
        _pure_because[package] = f"it cimports {', '.join(pure_dependencies)}, which runs pure"
    _finder.packages.add(package)
    if _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)


def cimported_packages(package: str) -> list[str]:
    """The other packages whose compiled modules `package`'s `.pxd` files cimport (a `.pxd` of
    C declarations only, with no module beside it, needs nothing of its package at run time)."""
    modules: set[str] = set()
    for pxd, _ in _pxd_files(package):
        with open(pxd, encoding="utf-8") as file:
            modules.update(a or b for a, b in _CIMPORT.findall(file.read()))
    top = package.partition(".")[0]
    found = set()
    for module in modules:
        name, _, rest = module.partition(".")
        spec = importlib.util.find_spec(name) if name != top else None
        if spec is None or not spec.submodule_search_locations:
            continue
        stem = os.path.join(spec.submodule_search_locations[0], *rest.split(".")) if rest else ""
        if not stem or not os.path.isfile(stem + ".pxd") or os.path.isfile(stem + ".py"):
            found.add(name)
    return sorted(found)


def _runs_pure(package: str) -> bool:
    return not all(compiled_modules(package).values())


def compiled_modules(package: str) -> dict[str, bool]:
    """Each module of `package` that has a compiled form, and whether that form is loaded."""
    state = {}
    for pxd, name in _pxd_files(package):
        if not os.path.isfile(pxd[: -len(".pxd")] + ".py"):
            continue
        module = importlib.import_module(name)
        state[name] = not (module.__file__ or "").endswith(".py")
    return state


def _pxd_files(package: str) -> list[tuple[str, str]]:
    """The path and module name of each `.pxd` file in `package`, sorted by path.

    os.walk, not pathlib: this runs when a package is imported, and pathlib costs more to
    import than the walk.
    """
    root = os.path.dirname(importlib.import_module(package).__file__ or "")
    found = []
    for folder, _, files in os.walk(root):
        for file in files:
            if file.endswith(".pxd"):
                path = os.path.join(folder, file)
                parts = os.path.relpath(path, root)[: -len(".pxd")].split(os.sep)
                found.append((path, ".".join((package, *parts))))
    return sorted(found)


def refuse_stale(package: str) -> None:
    """Raises ImportError, in one line naming them and the command that rebuilds them, if
    compiled modules of `package` (a top-level package of a checkout) were built from other
    sources than the checkout's."""
    directory = os.path.dirname(importlib.import_module(package).__file__ or "")
    stale = stale_modules(directory)
    if stale:
        raise ImportError(
            f"{', '.join(stale)}: compiled from other sources than this checkout's; rebuild with"
            f" `{REBUILD}` (or run pure with {PURE_ENV}=1)"
        )


def read_record(directory: str) -> dict[str, tuple[str, list[tuple[int, int, str, str]]]] | None:
    """The record of the compiled modules in `directory` (a top-level package): for each module,
    the file its build made and the (mtime_ns, size, sha256, path) of each file it was built
    from; None without one."""
    try:
        with open(os.path.join(directory, RECORD), encoding="utf-8") as file:
            lines = file.read().splitlines()
    except FileNotFoundError:
        return None
    record: dict[str, tuple[str, list[tuple[int, int, str, str]]]] = {}
    inputs: list[tuple[int, int, str, str]] = []
    for line in lines:
        if line.startswith("\t"):
            _, mtime, size, digest, path = line.split("\t")
            inputs.append((int(mtime), int(size), digest, path))
        else:
            module, built = line.split("\t")
            inputs = []
            record[module] = (built, inputs)
    return record


def stale_modules(directory: str) -> list[str]:
    """The compiled modules in `directory` (a top-level package) whose sources changed since
    they were built, by their record; in a checkout (`src/PKG`), those built without one. An
    input whose size and mtime are those recorded is not read; another is hashed."""
    record = read_record(directory)
    if record is None:
        if os.path.basename(os.path.dirname(directory)) != "src":
            return []  # installed: no sources to compare with
        top = os.path.basename(directory)
        return sorted(
            ".".join(
                [top, *os.path.relpath(os.path.join(folder, file), directory).split(os.sep)]
            ).removesuffix(EXTENSION_SUFFIX)
            for folder, _, files in os.walk(directory)
            for file in files
            if file.endswith(EXTENSION_SUFFIX)
        )
    changed: dict[str, bool] = {}
    stale = []
    for module, (built, inputs) in record.items():
        folder = os.path.join(directory, *module.split(".")[1:-1])
        if not os.path.isfile(os.path.join(folder, built)):
            continue  # not built (an optional module), or removed: nothing stale loads
        if any(input_changed(entry, changed) for entry in inputs):
            stale.append(module)
    return stale


def input_changed(entry: tuple[int, int, str, str], seen: dict[str, bool]) -> bool:
    """Whether a recorded input (mtime_ns, size, sha256, path) is gone or holds other bytes
    (`seen` caches the answer by path)."""
    mtime, size, digest, path = entry
    if path not in seen:
        try:
            stat = os.stat(path)
        except OSError:
            seen[path] = True
        else:
            seen[path] = (stat.st_mtime_ns, stat.st_size) != (mtime, size) and digest != (
                _sha256(path)
            )
    return seen[path]


def _sha256(path: str) -> str:
    import hashlib  # only when an input's mtime changed: not on every import

    with open(path, "rb") as file:
        return hashlib.sha256(file.read()).hexdigest()


def report(package: str) -> None:
    """Says once if `package` runs pure: always unless PERFETTO_PY_PURE=1 asked for it, and
    then under `-X dev` or PERFETTO_PY_NATIVE_NOTICE=1."""
    if package in _reported or (pure_requested() and not notice_requested()):
        return
    _reported.add(package)
    pure = [name for name, loaded in compiled_modules(package).items() if not loaded]
    if pure:
        why = _pure_because.get(package) or (
            f"{PURE_ENV}=1" if pure_requested() else "no compiled modules were built"
        )
        print(f"{package}: running as pure Python ({why}): {', '.join(pure)}", file=sys.stderr)


def report_pure_module(module: str, why: str) -> None:
    """Says once that `module`, which has no `.pxd` (a `.pyx` with a pure twin), runs pure
    although PERFETTO_PY_PURE=1 did not ask for it."""
    if module in _reported or pure_requested():
        return
    _reported.add(module)
    print(f"{module}: running as pure Python ({why})", file=sys.stderr)


def notice_requested() -> bool:
    """Whether `-X dev` or PERFETTO_PY_NATIVE_NOTICE=1 asks to hear which build runs."""
    return sys.flags.dev_mode or os.environ.get(NOTICE_ENV) == "1"


def expectation_error(package: str) -> str | None:
    """What is wrong with the build of `package` that loaded, if it is not the one asked for."""
    state = compiled_modules(package)
    if pure_requested():
        wrong = [name for name, loaded in state.items() if loaded]
        if wrong:
            return f"{PURE_ENV}=1 but compiled modules loaded: {', '.join(wrong)}"
    elif os.environ.get(EXPECT_COMPILED_ENV) == "1":
        wrong = [name for name, loaded in state.items() if not loaded]
        if wrong:
            return f"{EXPECT_COMPILED_ENV}=1 but these modules run pure: {', '.join(wrong)}"
    return None
