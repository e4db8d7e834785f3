"""Compiles this package's modules with Cython, in place: `.py` with a `.pxd` beside it, `.pyx`.

The build backend runs it when the package is installed from source (poetry-core's build
script hook); `tools/build_native.py` runs it for development. Without Cython, setuptools or a C
compiler it builds nothing and the package installs and runs as pure Python (a `.pyx` module,
having no pure form, is then missing). With PERFETTO_PY_EXPECT_COMPILED=1 any of those, or a
failed compilation, is an error instead. With PERFETTO_PY_NO_BUILD=1 it compiles nothing and
leaves `src/` as it is (`tools/dev.py trace` installs the packages recording does not need
compiled that way; `tools/build_native.py` compiles them later).

It also compiles every `lib*.c` under `src/` into a plain shared library `lib*.so` beside it
(e.g. an LD_PRELOAD library). A `.pyx` whose header has a `# build: optional` line is built on
its own, and a failure to build it (e.g. missing -dev headers of a library it links) is a
warning, even with PERFETTO_PY_EXPECT_COMPILED=1: the package works without it.

It is also the package's build backend (`build-backend = "build"`, `backend-path = ["."]`):
poetry-core's, except that a wheel is built from a copy of the package without any compiled
file, so that it holds exactly the building interpreter's modules (a checkout's `src/` also
holds the other Python versions' develop builds). A develop install (`pip install -e`)
compiles in place, into `src/`.

Every package with compiled modules carries an identical copy of this file.
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "src"
DIRECTIVES = {
    "language_level": 3,
    "binding": False,
    "boundscheck": False,
    "wraparound": False,
    "initializedcheck": False,
    "annotation_typing": False,
    "warn.unreachable": False,  # the pure-Python branches after `if cython.compiled: return`
}
EXPECT_COMPILED = "PERFETTO_PY_EXPECT_COMPILED"
NO_BUILD = "PERFETTO_PY_NO_BUILD"
# `.pyx` modules store integers through cast pointers into byte buffers.
CFLAGS = ["-O2", "-g0", "-fno-strict-aliasing"]
_PXD_CIMPORT = re.compile(r"^\s*(?:from\s+(\w+)[\w.]*\s+cimport|cimport\s+(\w+))", re.M)
_PY_CIMPORT = re.compile(r"\bcython\.cimports\.(\w+)")


# What a wheel is not built from: the products of earlier builds (in place or not).
_BUILT = ("*.so", "__pycache__", "*.egg-info")
_BUILT_AT_ROOT = ("build", "dist")
# The PEP 517 hooks other than build_wheel: poetry-core's, unchanged.
_POETRY_HOOKS = frozenset(
    {
        "build_sdist",
        "build_editable",
        "get_requires_for_build_wheel",
        "get_requires_for_build_sdist",
        "get_requires_for_build_editable",
        "prepare_metadata_for_build_wheel",
        "prepare_metadata_for_build_editable",
    }
)


def __getattr__(name: str) -> Any:
    if name in _POETRY_HOOKS:
        from poetry.core.masonry import api

        return getattr(api, name)
    raise AttributeError(name)


def build_wheel(
    wheel_directory: str,
    config_settings: dict[str, Any] | None = None,
    metadata_directory: str | None = None,
) -> str:
    """The PEP 517 hook: poetry-core's wheel, built (and compiled) in a copy of this package
    that holds none of the compiled files of earlier builds."""
    from poetry.core.masonry import api

    def ignore(directory: str, names: list[str]) -> set[str]:
        built = shutil.ignore_patterns(*_BUILT)(directory, names)
        return built | (set(_BUILT_AT_ROOT) & set(names) if Path(directory) == HERE else set())

    wheels = os.path.abspath(wheel_directory)
    metadata = os.path.abspath(metadata_directory) if metadata_directory else None
    with tempfile.TemporaryDirectory(prefix="perfetto-build-") as tmp:
        copy = Path(tmp) / HERE.name
        shutil.copytree(HERE, copy, ignore=ignore)
        here = Path.cwd()
        os.chdir(copy)  # poetry-core builds the project of the working directory
        try:
            name: str = api.build_wheel(wheels, config_settings, metadata)
        finally:
            os.chdir(here)
    return name


def compiled_sources(source: Path = SOURCE) -> list[Path]:
    """The modules to compile: `.py` modules with a `.pxd` beside them, and `.pyx` modules."""
    return sorted(
        [p.with_suffix(".py") for p in source.rglob("*.pxd") if p.with_suffix(".py").is_file()]
        + cython_sources(source)
    )


def cython_sources(source: Path = SOURCE) -> list[Path]:
    """The `.pyx` modules: Cython source with no pure form, each setting its own directives in
    its `# cython:` header (which take precedence over DIRECTIVES)."""
    return sorted(source.rglob("*.pyx"))


def module_name(path: Path, source: Path = SOURCE) -> str:
    """The dotted import name of a module under `source`."""
    return ".".join(path.relative_to(source).with_suffix("").parts)


def include_path(source: Path = SOURCE) -> list[Path]:
    """Where Cython finds the `.pxd` files this package's modules cimport.

    `source` itself, then, for each other package they cimport from (`from protozero._message
    cimport Message` in a `.pxd`, `cython.cimports.protozero...` in a `.py`), the directory
    that holds that package as installed, if it ships `.pxd` files: its wheel, its develop
    install, or the build environment's copy that `[build-system] requires` names.
    """
    own = {p.name for p in source.iterdir() if p.is_dir()}
    cimported: set[str] = set()
    for pxd in source.rglob("*.pxd"):
        cimported.update(a or b for a, b in _PXD_CIMPORT.findall(pxd.read_text()))
    for module in compiled_sources(source):
        cimported.update(_PY_CIMPORT.findall(module.read_text()))
    path = [source]
    for name in sorted(cimported - own):
        spec = importlib.util.find_spec(name)  # locates the package without importing it
        for location in (spec.submodule_search_locations or []) if spec else []:
            if any(Path(location).rglob("*.pxd")) and Path(location).parent not in path:
                path.append(Path(location).parent)
    return path


def _compiler() -> list[str]:
    return (os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc").split()


def _have_compiler() -> bool:
    return shutil.which(_compiler()[0]) is not None


def is_optional(path: Path) -> bool:
    """Whether a `.pyx` module says `# build: optional` in its header."""
    with path.open() as f:
        return any(line.startswith("# build: optional") for line in itertools.islice(f, 5))


def shared_libraries(source: Path = SOURCE) -> list[Path]:
    """The `lib*.c` sources to compile into `lib*.so` beside them."""
    return sorted(source.rglob("lib*.c"))


def _build_shared_library(c_source: Path) -> None:
    """Compiles one `lib*.c` into its `lib*.so` (raises CalledProcessError on failure)."""
    target = c_source.with_suffix(".so")
    command = [*_compiler(), *CFLAGS, "-shared", "-fPIC", "-fvisibility=hidden", "-pthread"]
    command += [f"-I{c_source.parent}", "-o", str(target), str(c_source), "-lm"]
    subprocess.run(command, check=True)


def _skip(reason: str) -> int:
    if os.environ.get(EXPECT_COMPILED) == "1":
        print(f"build.py: {reason}, and {EXPECT_COMPILED}=1", file=sys.stderr)
        return 1
    missing = [module_name(p) for p in cython_sources()]
    what = f"without {', '.join(missing)} (no pure form)" if missing else "as pure Python"
    print(
        f"WARNING: build.py: {reason}: {HERE.name} installs {what}, without compiled modules"
        " (see docs/native.md)",
        file=sys.stderr,
    )
    return 0


def build() -> int:
    """Compiles every module of `compiled_sources()` into a `.so` beside its `.py`."""
    sources = compiled_sources()
    libraries = shared_libraries()
    if (not sources and not libraries) or os.environ.get(NO_BUILD) == "1":
        return 0
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    for source in sources:  # never ship or load a compiled module older than its source
        # Only this interpreter's: other Python versions' builds are theirs to rebuild.
        source.with_name(source.stem + suffix).unlink(missing_ok=True)
    try:
        from Cython.Build import cythonize
        from setuptools import Distribution, Extension
    except ImportError as e:
        return _skip(f"{e.name} is not installed")
    if not _have_compiler():
        return _skip("no C compiler found")
    try:
        for library in libraries:
            _build_shared_library(library)
    except (OSError, subprocess.CalledProcessError) as e:
        return _skip(f"compilation failed ({e})")

    def extension(p: Path) -> Extension:
        return Extension(
            module_name(p),
            [str(p.relative_to(HERE))],
            extra_compile_args=CFLAGS,
            include_dirs=[str(SOURCE)],
        )

    def compile_modules(extensions: list[Extension]) -> None:
        build_dir = HERE / "build" / "native"
        modules = cythonize(
            extensions,
            build_dir=str(build_dir / "c"),
            compiler_directives=DIRECTIVES,
            include_path=[str(p) for p in include_path()],
            quiet=True,
            force=True,
        )
        dist = Distribution(
            {
                "ext_modules": modules,
                "package_dir": {"": "src"},
                "script_args": ["-q", "build_ext", "--inplace", "--build-temp", str(build_dir)],
            }
        )
        dist.parse_command_line()
        dist.run_commands()

    required = [p for p in sources if p.suffix != ".pyx" or not is_optional(p)]
    try:
        if required:
            compile_modules([extension(p) for p in required])
    except (Exception, SystemExit) as e:  # a failed compilation must not break a pure install
        return _skip(f"compilation failed ({e})")
    for optional in sorted(set(sources) - set(required)):
        try:
            compile_modules([extension(optional)])
        except (Exception, SystemExit) as e:
            print(
                f"WARNING: build.py: {module_name(optional)} not built ({e}); {HERE.name} works"
                " without it (see docs/native.md)",
                file=sys.stderr,
            )
    return 0


if __name__ == "__main__":
    os.chdir(HERE)
    sys.exit(build())
