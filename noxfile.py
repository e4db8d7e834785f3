"""Developer sessions. They run inside the project environment that `tools/dev.py` installs.

Run them through `python3 tools/dev.py nox -s NAME` (or `nox -s NAME` inside `.venv`).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import nox

ROOT = Path(__file__).parent
sys.path.insert(0, str(ROOT / "tools"))
from package_graph import build_backend, packages, support_package  # noqa: E402

# Session name (the package's directory) -> directory, in the package graph's order.
PACKAGE_DIRS: dict[str, Path] = {p.name: p.directory for p in packages(ROOT)}
TESTED = [name for name, path in PACKAGE_DIRS.items() if any(path.glob("tests/test_*.py"))]


def _has_compiled_modules(package: str, pattern: str) -> bool:
    return any((PACKAGE_DIRS[package] / "src").rglob(pattern))


# The packages whose tests also run pure (they have pure-mode compiled modules: `.pxd` files).
PURE_TESTED = [name for name in TESTED if _has_compiled_modules(name, "*.pxd")]
# The project's .venv runs 3.11; the others run in venvs nox makes (`tests_on`).
OTHER_PYTHONS = ["3.12", "3.13"]
ALL_PYTHONS = ["3.11", *OTHER_PYTHONS]
# `install_check` runs the installed packages' test suites on this version only (CI's budget);
# on the others it checks the rest (compiled modules, what a user runs first).
INSTALLED_TESTS_ON = "3.11"
# What the tests import or run (grpcio-tools and mypy-protobuf: tools/gen_protos.py's check;
# ruff and mypy: the generated code's lint and type check).
TEST_REQUIREMENTS = [
    *("pytest", "pytest-randomly", "pytest-timeout", "pytest-xdist", "hypothesis", "perfetto"),
    *("opentelemetry-sdk", "playwright"),
    *("grpcio-tools", "mypy-protobuf", "ruff", "mypy"),
]

# pytest-xdist: one worker per core, the tests of an `xdist_group` on one worker (tests that
# share what another test would disturb); a session's posargs come after, so `-- -n 0` runs
# them in this process.
PARALLEL = ["-n", "auto", "--dist", "loadgroup"]

PURE = "PERFETTO_PY_PURE"
EXPECT_COMPILED = "PERFETTO_PY_EXPECT_COMPILED"

nox.options.default_venv_backend = "none"
nox.options.sessions = ["lint", "typecheck", "protos_check", "layers", "tests", "tests_on"]
nox.options.error_on_missing_interpreters = True


@nox.session(python=False)
def lint(session: nox.Session) -> None:
    """Ruff lint and format check over the whole tree."""
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session(python=False)
@nox.parametrize("package", ["repo", *PACKAGE_DIRS])
def typecheck(session: nox.Session, package: str) -> None:
    """mypy --strict over one package (sources, tests, benchmarks); `repo` = tools, tests/,
    examples/ and testing/ (perfetto_testing)."""
    if package == "repo":
        targets = ["noxfile.py", "tools", "tests", "examples", "testing"]
    else:
        path = PACKAGE_DIRS[package]
        dirs = (path / "src", path / "tests", path / "benchmarks")
        targets = [str(p) for p in dirs if any(p.rglob("*.py"))]
    session.run("mypy", "--strict", *targets)


@nox.session(python=False)
@nox.parametrize("package", ["repo", *TESTED])
def tests(session: nox.Session, package: str) -> None:
    """pytest for one package (`repo` = the repository-wide checks in tests/), its tests spread
    over one worker per core (PARALLEL).

    A package with pure-mode compiled modules (`.pxd`) runs twice: compiled (built in place
    first; the run fails if they did not load), then pure Python (PERFETTO_PY_PURE=1). See
    docs/native.md.
    """
    path = ROOT / "tests" if package == "repo" else PACKAGE_DIRS[package] / "tests"
    pytest = ["pytest", str(path), *PARALLEL, *session.posargs]
    if package in PURE_TESTED:
        _build_native(session, "python")
        session.run(*pytest, env={EXPECT_COMPILED: "1"})
        session.run(*pytest, env={PURE: "1"})
    else:
        # `.pyx` modules have no pure form: their package's tests run once, built in place.
        if package != "repo" and _has_compiled_modules(package, "*.pyx"):
            _build_native(session, "python")
        session.run(*pytest)


@nox.session(python=False)
@nox.parametrize("build", ["compiled", "pure"])
def suite(session: nox.Session, build: str) -> None:
    """Every package's tests and the repository's in one pytest session (PARALLEL), compiled;
    or, with `build='pure'`, those of the packages with pure-mode compiled modules, pure.
    `dev.py test` runs the two side by side (they share no file)."""
    _build_native(session, "python")  # a no-op when current (`dev.py test` built first)
    if build == "compiled":
        env, paths = {EXPECT_COMPILED: "1"}, _every_suite()
    else:
        env, paths = {PURE: "1"}, [str(PACKAGE_DIRS[package] / "tests") for package in PURE_TESTED]
    session.run("pytest", *paths, *PARALLEL, *session.posargs, env=env)


def _every_suite() -> list[str]:
    """The test directories of every tested package, and tests/."""
    return [*(str(PACKAGE_DIRS[package] / "tests") for package in TESTED), str(ROOT / "tests")]


EXCLUSIVE = "PERFETTO_PY_EXCLUSIVE_TESTS"


@nox.session(python=False)
def exclusive_tests(session: nox.Session) -> None:
    """The tests marked `exclusive` (they change the machine for every process: a CPU taken
    offline), compiled, one at a time; run while nothing else runs (`dev.py test` gives them a
    phase of their own). Elsewhere they skip, saying so."""
    _build_native(session, "python")
    session.run(
        "pytest",
        "-m",
        "exclusive",
        "-p",
        "no:randomly",
        *session.posargs,
        env={EXCLUSIVE: "1", EXPECT_COMPILED: "1"},
    )


def _build_native(session: nox.Session, python: str) -> None:
    """tools/build_native.py run by `python`. The Python versions' in-place builds share no file
    (each has its modules' names and its own `build/native/TAG`): they may run side by side."""
    session.run(python, "tools/build_native.py", external=True)


@nox.session(python=False)
@nox.parametrize("package", ["repo", *TESTED])
@nox.parametrize("python", OTHER_PYTHONS)
def tests_on(session: nox.Session, python: str, package: str) -> None:
    """pytest for one package on another Python version, compiled only (`tests` runs 3.11):
    `nox -s "tests_on(python='3.13', package='client')"`.

    Every package's session of that version shares one venv, `.nox/develop-X.Y`: every package
    in develop mode (compiled modules built in place for that interpreter, beside 3.11's) and
    the test requirements at poetry.lock's versions.
    """
    path = ROOT / "tests" if package == "repo" else PACKAGE_DIRS[package] / "tests"
    _pytest_on(session, python, [str(path)])


@nox.session(python=False)
@nox.parametrize("python", OTHER_PYTHONS)
def suite_on(session: nox.Session, python: str) -> None:
    """`suite`'s compiled run on another Python version, in `tests_on`'s venv:
    `nox -s "suite_on(python='3.13')"`."""
    _pytest_on(session, python, _every_suite())


def _pytest_on(session: nox.Session, python: str, paths: list[str]) -> None:
    """pytest over `paths`, compiled, in Python `python`'s develop venv (`_develop_venv`)."""
    bin_dir = _develop_venv(session, python) / "bin"
    _build_native(session, str(bin_dir / "python"))
    pytest = [str(bin_dir / "python"), "-m", "pytest", *paths, *PARALLEL, *session.posargs]
    # The venv's scripts (traced, perfetto-trace, ...) first on PATH, as for an installed user.
    path_env = os.pathsep.join([str(bin_dir), os.environ.get("PATH", "")])
    session.run(*pytest, env={EXPECT_COMPILED: "1", "PATH": path_env}, external=True)


def _develop_venv(session: nox.Session, python: str) -> Path:
    """`.nox/develop-X.Y`, made with that interpreter and brought up to date: every package in
    develop mode, once per change of the pyproject files, the lock or the requirements."""
    venv = ROOT / ".nox" / f"develop-{python}"
    interpreter = _require_interpreter(session, python)
    backend = build_backend(ROOT)
    assert backend is not None
    projects = [backend, *PACKAGE_DIRS.values(), support_package(ROOT)]
    inputs = [ROOT / "poetry.lock", *(path / "pyproject.toml" for path in projects)]
    stamp = venv / ".develop-installed"
    requirements = _dev().locked(TEST_REQUIREMENTS)
    digest = hashlib.sha256(" ".join(requirements).encode())
    for path in inputs:
        digest.update(path.read_bytes())
    if stamp.is_file() and stamp.read_text() == digest.hexdigest():
        return venv
    session.run(interpreter, "-m", "venv", "--clear", str(venv), external=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    session.run(*pip, *requirements, external=True)
    session.run(str(venv / "bin" / "python"), "tools/dev.py", "develop", external=True)
    stamp.write_text(digest.hexdigest())
    return venv


def _dev() -> ModuleType:
    """tools/dev.py, imported (its `locked` pins requirements to poetry.lock)."""
    spec = importlib.util.spec_from_file_location("dev", ROOT / "tools" / "dev.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _require_interpreter(session: nox.Session, version: str) -> str:
    """Python `version`'s interpreter; the session fails in one line without it."""
    interpreter = _interpreter(version)
    if interpreter is None:
        session.error(f"Python {version} not found (neither python{version} on PATH nor in pyenv)")
    return interpreter


def _interpreter(version: str) -> str | None:
    """`pythonX.Y` from PATH, else pyenv's newest X.Y (pyenv's shim of a version that is not
    selected does not count: it refuses to run)."""
    root = ""
    if shutil.which("pyenv") is not None:
        run = subprocess.run(["pyenv", "root"], capture_output=True, text=True, check=False)
        root = run.stdout.strip()
    on_path = shutil.which(f"python{version}")
    if on_path is not None and (not root or Path(on_path).parent != Path(root) / "shims"):
        return on_path
    candidates = [
        p / "bin" / f"python{version}"
        for p in (Path(root) / "versions").glob(f"{version}.*")
        if root and (p / "bin" / f"python{version}").is_file()
    ]
    newest = max(
        candidates,
        key=lambda p: [int(x) for x in p.parent.parent.name.split(".") if x.isdigit()],
        default=None,
    )
    return str(newest) if newest else None


@nox.session(python=False)
def protos(session: nox.Session) -> None:
    """Regenerates every generated file under protos/src from protos/perfetto/**.proto."""
    session.run("python", "tools/gen_protos.py")


@nox.session(python=False)
def protos_check(session: nox.Session) -> None:
    """Fails if the committed generated code differs from a fresh generation."""
    session.run("python", "tools/gen_protos.py", "--check")


@nox.session(python=False)
def layers(session: nox.Session) -> None:
    """Fails if a package imports a package that is not below it (README.md, "Layers")."""
    session.run("python", "tools/check_layers.py")


# Where the browser tests also save the screenshots that the docs show (`nox -s screenshots`).
SCREENSHOTS = "PERFETTO_PY_DOCS_SCREENSHOTS"


@nox.session(python=False)
def screenshots(session: nox.Session) -> None:
    """Regenerates the docs' screenshots of the HTML reports (docs/images/), taken by their
    browser tests in headless Chromium (/usr/bin/chromium)."""
    session.run("python", "tools/build_native.py")
    tests = [
        "packages/client/tests/test_tracer_html.py",
        "packages/client/tests/test_tracer_html_tracks.py",
        "packages/heapprofd/tests/test_heap_profile_html.py",
    ]
    pytest = ["pytest", *tests, "-p", "no:randomly", "-q", "-k", "screenshot", *session.posargs]
    session.run(*pytest, env={EXPECT_COMPILED: "1", SCREENSHOTS: str(ROOT / "docs" / "images")})


@nox.session(python=False)
def bench(session: nox.Session) -> None:
    """Runs every package's benchmarks, compiled then pure; each prints same-run references."""
    scripts = sorted(ROOT.glob("packages/*/benchmarks/bench_*.py"))
    if not scripts:
        session.error("no benchmarks found")
    session.run("python", "tools/build_native.py")
    for script in scripts:
        session.run("python", str(script), *session.posargs, env={EXPECT_COMPILED: "1"})
        if "--this-build-only" not in script.read_text(encoding="utf-8"):
            # Scripts with that flag already ran themselves pure and printed both builds.
            session.run("python", str(script), *session.posargs, env={PURE: "1"})


# What the benchmarks compare against, beyond the test requirements (`perf_table`'s venvs).
BENCH_REQUIREMENTS = ["viztracer", "memray"]


@nox.session(python=False)
def perf_table(session: nox.Session) -> None:
    """Measures the README's performance table (tools/perf_table.py) with every version's
    compiled build: `nox -s perf_table -- --only KEY ...` measures those rows only. The rows
    against upstream need PERFETTO_UPSTREAM_TRACED and PERFETTO_UPSTREAM_PRODUCER."""
    pythons = []
    for version in OTHER_PYTHONS:
        python = str(_develop_venv(session, version) / "bin" / "python")
        _build_native(session, python)
        pip = [python, "-m", "pip", "install", "-q", *_dev().locked(BENCH_REQUIREMENTS)]
        session.run(*pip, external=True)
        pythons += ["--python", f"{version}={python}"]
    session.run("python", "tools/build_native.py")
    session.run("python", "tools/perf_table.py", "measure", *pythons, *session.posargs)


# Packaging and cross-version compatibility (docs/compatibility.md).

DIST = ROOT / "dist"
COMPAT_WORK = ROOT / "build" / "compat"
# Earlier versions the conformance kit runs against, one commit per line (`nox -s compat`).
COMPAT_REFS = [
    "4f671fe",  # v0.1.0-foundation: the service before the client library
    "70f5eeb",  # the client library (Backend.SYSTEM apps), before the .pyx build hook
]


@nox.session(python=False)
@nox.parametrize("python", ALL_PYTHONS)
def build(session: nox.Session, python: str) -> None:
    """An sdist and a wheel of every package into dist/X.Y/, built by Python X.Y, each with its
    declared backend."""
    _build_dists(session, ROOT, DIST / python, python)


@nox.session(python=False)
@nox.parametrize("python", ALL_PYTHONS)
def install_check(session: nox.Session, python: str) -> None:
    """Builds dist/X.Y/, then installs perfetto-client, -service, -cmd and -heapprofd each alone
    into a venv of Python X.Y and uses them (and runs their tests, on INSTALLED_TESTS_ON)."""
    _build_dists(session, ROOT, DIST / python, python)
    interpreter = ["--python", _require_interpreter(session, python)]
    tests = [] if python == INSTALLED_TESTS_ON else ["--no-tests"]
    check = [sys.executable, "tools/install_check.py", *interpreter, *tests, str(DIST / python)]
    session.run(*check, external=True)


@nox.session(venv_backend="venv", reuse_venv=True)
def compat(session: nox.Session) -> None:
    """The conformance kit across versions: `nox -s compat -- REF...` (default COMPAT_REFS).

    Builds this checkout and each REF into venvs of their own, then runs tests/conformance
    with the clients of every version against the `traced` of every other.
    """
    refs = session.posargs or COMPAT_REFS
    versions = [f"current={_compat_venv(session, ROOT, COMPAT_WORK / 'current')}"]
    for ref in refs:
        sha = session.run(
            "git",
            "rev-parse",
            "--verify",
            "--quiet",
            f"{ref}^{{commit}}",
            silent=True,
            success_codes=[0, 1],
            external=True,
        )
        if not isinstance(sha, str) or not sha.strip():
            session.error(f"compat: {ref} is not in this clone (shallow? git fetch --unshallow)")
        work = COMPAT_WORK / sha.strip()
        python = work / "venv" / "bin" / "python"
        if not (work / "ready").is_file():  # a commit's build never changes: kept across runs
            shutil.rmtree(work, ignore_errors=True)
            source = work / "source"
            source.mkdir(parents=True)
            session.run(
                "sh", "-c", f'git archive "{sha.strip()}" | tar -x -C "{source}"', external=True
            )
            python = _compat_venv(session, source, work)
            (work / "ready").write_text(f"{ref}\n")
        versions.append(f"{ref}={python}")
    env = {"PERFETTO_CONFORMANCE_VERSIONS": ",".join(versions)}
    args = ["-m", "pytest", "tests/conformance", "-v", "-p", "no:cacheprovider"]
    session.run(sys.executable, *args, env=env, external=True)


def _build_dists(
    session: nox.Session, tree: Path, out: Path, python: str = "3.11", venv_name: str = "build"
) -> None:
    """Builds `tree` into `out` with Python `python`, in the venv `.nox/VENV_NAME-X.Y`."""
    venv = ROOT / ".nox" / f"{venv_name}-{python}"
    builder = venv / "bin" / "python"
    if not builder.is_file():
        interpreter = _require_interpreter(session, python)
        session.run(interpreter, "-m", "venv", "--clear", str(venv), external=True)
        session.run(str(builder), "-m", "pip", "install", "-q", "build", external=True)
    shutil.rmtree(out, ignore_errors=True)
    dists = [str(ROOT / "tools" / "dists.py"), "build", str(out), "--source", str(tree)]
    session.run(str(builder), *dists, external=True)


def _compat_venv(session: nox.Session, tree: Path, work: Path) -> Path:
    """Builds `tree` into work/dist and installs its service (and client) into work/venv."""
    dists = work / "dist"
    # A builder of its own: install_check's builders run beside it (dev.py test's lanes).
    _build_dists(session, tree, dists, venv_name="compat-build")
    wanted = [
        name
        for name, glob in (
            ("perfetto-service", "perfetto_service-*"),
            ("perfetto-client", "perfetto_client-*"),
        )
        if any(dists.glob(f"{glob}.whl"))
    ]
    tool = str(ROOT / "tools" / "dists.py")
    session.run("python", tool, "venv", str(work / "venv"), str(dists), *wanted, silent=True)
    return work / "venv" / "bin" / "python"
