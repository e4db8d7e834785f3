"""The build backend of every package with compiled modules, and the compiler it runs.

A package names it in its `pyproject.toml` (`build-backend = "perfetto_build"`, with
`perfetto-build` in `[build-system] requires`). It is poetry-core's backend, except that:

- a package with modules to compile (a `.py` with a `.pxd` beside it, a `.pyx`, a `lib*.c`)
  gets them compiled: in place for a develop install (`pip install -e`), in a copy of the package
  that holds no compiled file for a wheel, so that the wheel holds exactly the building
  interpreter's modules (a checkout's `src/` also holds the other Python versions' builds);
- a build in place writes, beside the modules, a record of the sources each was compiled from
  (`.native-build.<interpreter>`): its `.py`/`.pyx`, the files it includes, the `.pxd` files it
  cimports (its package's and its siblings'), the package's C headers, and this file.
  `protozero._native` reads it when the package is imported from a checkout, and
  `tools/build_native.py` to decide what to rebuild.

Run as a script (`python perfetto_build.py` in a package's directory, as poetry-core runs a
build script and `tools/build_native.py` does) it compiles that package in place. Without
Cython, setuptools or a C compiler it builds nothing and the package installs and runs as pure
Python (a `.pyx` module, having no pure form, is then missing). With
PERFETTO_PY_EXPECT_COMPILED=1 any of those, or a failed compilation, is an error instead. With
PERFETTO_PY_NO_BUILD=1 it compiles nothing and leaves `src/` as it is (`tools/dev.py trace`
installs the packages recording does not need compiled that way). With
PERFETTO_BUILD_CACHE=DIR (`tools/dev.py` sets it to `build/native-cache/`) a module whose
inputs (`module_key`) were compiled before, in place or for a wheel, is copied from DIR instead
of compiled again, and each module compiled is stored there. A `.pyx` whose header has a
`# build: optional` line is built on its own, and a failure to build it is a warning, even with
PERFETTO_PY_EXPECT_COMPILED=1: the package works without it. See docs/native.md.
"""

from __future__ import annotations

import hashlib
import importlib.util
import itertools
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

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
CACHE = "PERFETTO_BUILD_CACHE"
_FOR_WHEEL = "PERFETTO_BUILD_FOR_WHEEL"
"""Set while a wheel is built: its copy of the package gets no record (it has no checkout)."""
# `.pyx` modules store integers through cast pointers into byte buffers.
CFLAGS = ["-O2", "-g0", "-fno-strict-aliasing"]
EXT_SUFFIX: str = sysconfig.get_config_var("EXT_SUFFIX")
RECORD = ".native-build" + EXT_SUFFIX.removesuffix(".so")
"""The record of a top-level package's compiled modules, in its directory (one per Python)."""

_NAMES = r"(?:\(([^)]*)\)|([\w \t,]*))"  # `(a, b)` over several lines, or `a, b` on one
_PXD_CIMPORT = re.compile(
    rf"^[ \t]*(?:from[ \t]+([\w.]+)[ \t]+cimport[ \t]+{_NAMES}|cimport[ \t]+([\w.]+))", re.M
)
_PY_CIMPORT = re.compile(rf"\bcython\.cimports\.([\w.]+)(?:[ \t]+import[ \t]+{_NAMES})?")
_INCLUDE = re.compile(r"""^[ \t]*include[ \t]+["']([^"']+)["']""", re.M)

# What a wheel is not built from: the products of earlier builds (in place or not).
_BUILT = ("*.so", "__pycache__", "*.egg-info", ".native-build.*")
_BUILT_AT_ROOT = ("build", "dist")


def _poetry(project: Path) -> Any:
    """poetry-core's project in `project`, with this file as its build script when it has
    anything to compile."""
    from poetry.core.factory import Factory

    poetry = Factory().create_poetry(project, with_groups=False)
    if compiled_sources(project / "src") or shared_libraries(project / "src"):
        poetry.package.build_config = {"script": __file__, "generate-setup-file": False}
    return poetry


def build_wheel(
    wheel_directory: str,
    config_settings: dict[str, Any] | None = None,
    metadata_directory: str | None = None,
) -> str:
    """The PEP 517 hook: poetry-core's wheel, built (and compiled) in a copy of the package in
    the working directory that holds none of the compiled files of earlier builds."""
    from poetry.core.masonry.builders.wheel import WheelBuilder

    here = Path.cwd()

    def ignore(directory: str, names: list[str]) -> set[str]:
        built = shutil.ignore_patterns(*_BUILT)(directory, names)
        return built | (set(_BUILT_AT_ROOT) & set(names) if Path(directory) == here else set())

    metadata = Path(metadata_directory).resolve() if metadata_directory else None
    with tempfile.TemporaryDirectory(prefix="perfetto-build-") as tmp, _for_wheel():
        copy = Path(tmp) / here.name
        shutil.copytree(here, copy, ignore=ignore)
        os.chdir(copy)  # poetry-core runs the build script in the working directory
        try:
            name: str = WheelBuilder.make_in(
                _poetry(copy),
                Path(wheel_directory).resolve(),
                metadata_directory=metadata,
                config_settings=config_settings,
            )
        finally:
            os.chdir(here)
    return name


@contextmanager
def _for_wheel() -> Iterator[None]:
    os.environ[_FOR_WHEEL] = "1"
    try:
        yield
    finally:
        del os.environ[_FOR_WHEEL]


def build_editable(
    wheel_directory: str,
    config_settings: dict[str, Any] | None = None,
    metadata_directory: str | None = None,
) -> str:
    """The PEP 517 hook: poetry-core's editable wheel, the modules compiled in place."""
    from poetry.core.masonry.builders.wheel import WheelBuilder

    metadata = Path(metadata_directory) if metadata_directory else None
    name: str = WheelBuilder.make_in(
        _poetry(Path.cwd()),
        Path(wheel_directory),
        metadata_directory=metadata,
        editable=True,
        config_settings=config_settings,
    )
    return name


def prepare_metadata_for_build_wheel(
    metadata_directory: str, config_settings: dict[str, Any] | None = None
) -> str:
    """The PEP 517 hook: poetry-core's metadata (platform-specific when there is anything to
    compile)."""
    from poetry.core.masonry.builders.wheel import WheelBuilder

    builder = WheelBuilder(_poetry(Path.cwd()), config_settings=config_settings)
    name: str = builder.prepare_metadata(Path(metadata_directory)).name
    return name


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def __getattr__(name: str) -> Any:
    """The other PEP 517 hooks (sdist, requirements): poetry-core's, unchanged."""
    if name.startswith(("build_sdist", "get_requires_for_")):
        from poetry.core.masonry import api

        return getattr(api, name)
    raise AttributeError(name)


def compiled_sources(source: Path) -> list[Path]:
    """The modules to compile: `.py` modules with a `.pxd` beside them, and `.pyx` modules."""
    return sorted(
        [p.with_suffix(".py") for p in source.rglob("*.pxd") if p.with_suffix(".py").is_file()]
        + cython_sources(source)
    )


def cython_sources(source: Path) -> list[Path]:
    """The `.pyx` modules: Cython source with no pure form, each setting its own directives in
    its `# cython:` header (which take precedence over DIRECTIVES)."""
    return sorted(source.rglob("*.pyx"))


def shared_libraries(source: Path) -> list[Path]:
    """The `lib*.c` sources to compile into `lib*.so` beside them."""
    return sorted(source.rglob("lib*.c"))


def module_name(path: Path, source: Path) -> str:
    """The dotted import name of a module under `source`."""
    return ".".join(path.relative_to(source).with_suffix("").parts)


def built_file(path: Path) -> Path:
    """What compiling `path` makes: the running interpreter's module, or a `lib*.so`."""
    return (
        path.with_suffix(".so") if path.suffix == ".c" else path.with_name(path.stem + EXT_SUFFIX)
    )


def _cimported_modules(text: str, python: bool) -> set[str]:
    """The modules (and, for `from X cimport a`, the candidates `X.a`) a source cimports."""
    found: set[str] = set()
    for match in (_PY_CIMPORT if python else _PXD_CIMPORT).finditer(text):
        module = match.group(1) or match.group(4)
        found.add(module)
        names = match.group(2) or match.group(3) or ""
        found.update(f"{module}.{n.split()[0]}" for n in names.split(",") if n.split())
    return found


def include_path(source: Path) -> list[Path]:
    """Where Cython finds the `.pxd` files the modules under `source` cimport.

    `source` itself, then, for each other package they cimport from (`from protozero._message
    cimport Message` in a `.pxd`, `cython.cimports.protozero...` in a `.py`), the directory
    that holds that package as installed, if it ships `.pxd` files: its wheel, its develop
    install, or the build environment's copy that `[build-system] requires` names.
    """
    own = {p.name for p in source.iterdir() if p.is_dir()}
    cimported: set[str] = set()
    for pxd in source.rglob("*.pxd"):
        cimported.update(_cimported_modules(pxd.read_text(), python=False))
    for module in compiled_sources(source):
        cimported.update(_cimported_modules(module.read_text(), module.suffix == ".py"))
    path = [source]
    for name in sorted({m.partition(".")[0] for m in cimported} - own):
        spec = importlib.util.find_spec(name)  # locates the package without importing it
        for location in (spec.submodule_search_locations or []) if spec else []:
            if any(Path(location).rglob("*.pxd")) and Path(location).parent not in path:
                path.append(Path(location).parent)
    return path


def module_inputs(module: Path, path: list[Path]) -> list[Path]:
    """The files `module` (a `.py`, `.pyx` or `lib*.c` under `path[0]`) is compiled from: itself,
    its `.pxd`, what it includes, the `.pxd` files it cimports (found on `path`, and theirs in
    turn), the package's C headers and this file; not those of installed distributions (an
    isolated build's siblings), which are not sources."""
    return [p for p in _compiled_from(module, path) if "site-packages" not in p.parts]


def module_key(module: Path, path: list[Path]) -> str:
    """A digest of everything compiling `module` depends on: the contents of the files it is
    compiled from (installed siblings' `.pxd` files included), each named relative to the
    directory of `path` that holds it, and the interpreter, Cython, compiler and flags."""
    import Cython

    digest = hashlib.sha256()
    tools = [sys.version, EXT_SUFFIX, Cython.__version__, *_compiler(), *CFLAGS]
    digest.update(repr([tools, sorted(DIRECTIVES.items())]).encode())
    named = {}
    for file in _compiled_from(module, path):
        holder = next((d for d in path if file.is_relative_to(d)), file.parent)
        named[file.relative_to(holder).as_posix()] = file
    for name, file in sorted(named.items()):
        digest.update(f"\0{name}\0".encode())
        digest.update(file.read_bytes())
    return digest.hexdigest()


def _compiled_from(module: Path, path: list[Path]) -> list[Path]:
    found: set[Path] = set()
    stack = [module, module.with_suffix(".pxd")] if module.suffix == ".py" else [module]
    while stack:
        file = stack.pop()
        if file in found or not file.is_file():
            continue
        found.add(file)
        if file.suffix == ".c":
            continue
        text = file.read_text()
        stack.extend(file.parent / name for name in _INCLUDE.findall(text))
        for name in _cimported_modules(text, python=file.suffix == ".py"):
            relative = Path(*name.split(".")).with_suffix(".pxd")
            stack.extend(d / relative for d in path if (d / relative).is_file())
    found.update(path[0].rglob("*.h"))
    found.add(Path(__file__).resolve())
    return sorted(found)


def write_records(source: Path, modules: list[Path]) -> None:
    """Records the inputs of each of `modules` (compiled in place just now), one record per
    top-level package, in the format `protozero._native.read_record` reads."""
    path = include_path(source)
    records: dict[str, list[str]] = {}
    for module in modules:
        lines = records.setdefault(module.relative_to(source).parts[0], [])
        lines.append(f"{module_name(module, source)}\t{built_file(module).name}")
        for file in module_inputs(module, path):
            stat = file.stat()
            digest = hashlib.sha256(file.read_bytes()).hexdigest()
            lines.append(f"\t{stat.st_mtime_ns}\t{stat.st_size}\t{digest}\t{file}")
    for package, lines in records.items():
        (source / package / RECORD).write_text("\n".join(lines) + "\n")


def _compiler() -> list[str]:
    return (os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc").split()


def is_optional(path: Path) -> bool:
    """Whether a `.pyx` module says `# build: optional` in its header."""
    with path.open() as f:
        return any(line.startswith("# build: optional") for line in itertools.islice(f, 5))


def _build_shared_library(c_source: Path) -> None:
    """Compiles one `lib*.c` into its `lib*.so` (raises CalledProcessError on failure), which
    appears whole: every Python version's build makes this same file, and they may run side by
    side."""
    built = built_file(c_source)
    partial = built.with_name(f".{built.name}.{os.getpid()}")
    command = [*_compiler(), *CFLAGS, "-shared", "-fPIC", "-fvisibility=hidden", "-pthread"]
    command += [f"-I{c_source.parent}", "-o", str(partial), str(c_source), "-lm"]
    try:
        subprocess.run(command, check=True)
        os.replace(partial, built)
    finally:
        partial.unlink(missing_ok=True)


def _skip(project: Path, reason: str) -> int:
    if os.environ.get(EXPECT_COMPILED) == "1":
        print(f"perfetto_build: {reason}, and {EXPECT_COMPILED}=1", file=sys.stderr)
        return 1
    source = project / "src"
    missing = [module_name(p, source) for p in cython_sources(source)]
    what = f"without {', '.join(missing)} (no pure form)" if missing else "as pure Python"
    print(
        f"WARNING: perfetto_build: {reason}: {project.name} installs {what}, without compiled"
        " modules (see docs/native.md)",
        file=sys.stderr,
    )
    return 0


def build(project: Path) -> int:
    """Compiles every module of the package in `project` into a file beside its source, and
    records what each was compiled from (unless the build is a wheel's)."""
    source = project / "src"
    sources = compiled_sources(source)
    libraries = shared_libraries(source)
    if (not sources and not libraries) or os.environ.get(NO_BUILD) == "1":
        return 0
    for record in source.glob(f"*/{RECORD}"):
        record.unlink()
    for module in sources:  # never ship or load a compiled module older than its source
        # Only this interpreter's: other Python versions' builds are theirs to rebuild.
        built_file(module).unlink(missing_ok=True)
    try:
        from Cython.Build import cythonize
        from setuptools import Distribution, Extension
    except ImportError as e:
        return _skip(project, f"{e.name} is not installed")
    if shutil.which(_compiler()[0]) is None:
        return _skip(project, "no C compiler found")
    try:
        for library in libraries:
            _build_shared_library(library)
    except (OSError, subprocess.CalledProcessError) as e:
        return _skip(project, f"compilation failed ({e})")

    def extension(p: Path) -> Any:
        return Extension(
            module_name(p, source),
            [str(p.relative_to(project))],
            extra_compile_args=CFLAGS,
            include_dirs=[str(source)],
        )

    path = include_path(source)
    cache = os.environ.get(CACHE)

    def compile_modules(modules: list[Path]) -> None:
        keys = {p: Path(cache) / module_key(p, path) for p in modules} if cache else {}
        missing = [p for p in modules if not (cache and _restore(keys[p], p))]
        if cache and len(missing) < len(modules):
            print(
                f"perfetto_build: {len(modules) - len(missing)} of {len(modules)} modules of"
                f" {project.name} taken from {cache}",
                flush=True,
            )
        if not missing:
            return
        # Each interpreter's intermediate files apart: the versions' builds may run side by side.
        build_dir = project / "build" / "native" / EXT_SUFFIX.removesuffix(".so").strip(".")
        jobs = min(len(missing), len(os.sched_getaffinity(0)))  # a module per CPU at a time
        extensions = cythonize(
            [extension(p) for p in missing],
            build_dir=str(build_dir / "c"),
            compiler_directives=DIRECTIVES,
            include_path=[str(p) for p in path],
            quiet=True,
            force=True,
            nthreads=jobs if jobs > 1 else 0,
        )
        build_ext = ["build_ext", "--inplace", "--build-temp", str(build_dir), f"-j{jobs}"]
        dist = Distribution(
            {
                "ext_modules": extensions,
                "package_dir": {"": "src"},
                "script_args": ["-q", *build_ext],
            }
        )
        dist.parse_command_line()
        dist.run_commands()
        for p in missing if cache else []:
            _store(keys[p], p)

    required = [p for p in sources if p.suffix != ".pyx" or not is_optional(p)]
    try:
        if required:
            compile_modules(required)
    except (Exception, SystemExit) as e:  # a failed compilation must not break a pure install
        return _skip(project, f"compilation failed ({e})")
    for optional in sorted(set(sources) - set(required)):
        try:
            compile_modules([optional])
        except (Exception, SystemExit) as e:
            print(
                f"WARNING: perfetto_build: {module_name(optional, source)} not built ({e});"
                f" {project.name} works without it (see docs/native.md)",
                file=sys.stderr,
            )
    if os.environ.get(_FOR_WHEEL) != "1":
        write_records(source, sorted([*sources, *libraries]))
    return 0


def _restore(entry: Path, module: Path) -> bool:
    """Copies `module`'s compiled file from the cache entry `entry`, if it holds one."""
    cached = entry / built_file(module).name
    if not cached.is_file():
        return False
    shutil.copyfile(cached, built_file(module))
    return True


def _store(entry: Path, module: Path) -> None:
    """Puts `module`'s compiled file into the cache entry `entry` (whole or not at all: a
    concurrent build may read it)."""
    entry.mkdir(parents=True, exist_ok=True)
    partial = entry / f".{built_file(module).name}.{os.getpid()}"
    shutil.copyfile(built_file(module), partial)
    os.replace(partial, entry / built_file(module).name)


if __name__ == "__main__":
    sys.exit(build(Path.cwd()))
