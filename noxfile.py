"""Developer sessions. They run inside the project environment that `tools/dev.py` installs.

Run them through `python3 tools/dev.py nox -s NAME` (or `nox -s NAME` inside `.venv`).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import nox

ROOT = Path(__file__).parent
PACKAGE_DIRS: dict[str, Path] = {
    "protozero": ROOT / "packages" / "protozero",
    "protos": ROOT / "protos",
    "wire": ROOT / "packages" / "wire",
    "smb": ROOT / "packages" / "smb",
    "service": ROOT / "packages" / "service",
    "client": ROOT / "packages" / "client",
    "cli": ROOT / "packages" / "cli",
    "heapprofd": ROOT / "packages" / "heapprofd",
}
TESTED = [name for name, path in PACKAGE_DIRS.items() if any(path.glob("tests/test_*.py"))]
# The project's .venv runs 3.11; the others run in venvs nox makes (`tests_on`).
OTHER_PYTHONS = ["3.12", "3.13"]
TEST_REQUIREMENTS = ["pytest", "pytest-randomly", "pytest-timeout", "hypothesis", "perfetto"]
BUILD_REQUIREMENTS = ["cython", "setuptools"]

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
    """mypy --strict over one package (sources, tests, benchmarks); `repo` = tools, tests/
    and examples/."""
    if package == "repo":
        targets = ["noxfile.py", "tools", "tests", "examples"]
    else:
        path = PACKAGE_DIRS[package]
        dirs = (path / "src", path / "tests", path / "benchmarks")
        targets = [str(p) for p in dirs if any(p.rglob("*.py"))]
    session.run("mypy", "--strict", *targets)


@nox.session(python=False)
@nox.parametrize("package", ["repo", *TESTED])
def tests(session: nox.Session, package: str) -> None:
    """pytest for one package (`repo` = the repository-wide checks in tests/).

    A package with pure-mode compiled modules (`.pxd`) runs twice: compiled (built in place
    first; the run fails if they did not load), then pure Python (PERFETTO_PY_PURE=1). See
    docs/native.md.
    """
    path = ROOT / "tests" if package == "repo" else PACKAGE_DIRS[package] / "tests"
    if package != "repo" and _has_compiled_modules(package, "*.pxd"):
        session.run("python", "tools/build_native.py")
        session.run("pytest", str(path), *session.posargs, env={EXPECT_COMPILED: "1"})
        session.run("pytest", str(path), *session.posargs, env={PURE: "1"})
    else:  # `.pyx` modules have no pure form: their package's tests run once, built in place
        if package != "repo" and _has_compiled_modules(package, "*.pyx"):
            session.run("python", "tools/build_native.py")
        session.run("pytest", str(path), *session.posargs)


def _has_compiled_modules(package: str, pattern: str) -> bool:
    return any((PACKAGE_DIRS[package] / "src").rglob(pattern))


@nox.session(python=OTHER_PYTHONS, venv_backend="venv", reuse_venv=True)
@nox.parametrize("package", ["repo", *TESTED])
def tests_on(session: nox.Session, package: str) -> None:
    """pytest for one package on another Python version, compiled only (`tests` runs 3.11).

    The session's venv holds every package in develop mode (their compiled modules built in
    place for that interpreter, beside 3.11's) and the test requirements at poetry.lock's
    versions.
    """
    _develop_install(session)
    session.run("python", "tools/build_native.py")
    path = ROOT / "tests" if package == "repo" else PACKAGE_DIRS[package] / "tests"
    session.run("pytest", str(path), *session.posargs, env={EXPECT_COMPILED: "1"})


def _develop_install(session: nox.Session) -> None:
    """Installs every package in develop mode into the session's venv, once per change of the
    pyproject files and the lock."""
    inputs = [ROOT / "poetry.lock", *(path / "pyproject.toml" for path in PACKAGE_DIRS.values())]
    stamp = Path(str(session.virtualenv.location)) / ".develop-installed"
    fingerprint = hashlib.sha256(b"".join(p.read_bytes() for p in inputs)).hexdigest()
    if stamp.is_file() and stamp.read_text() == fingerprint:
        return
    session.install(*_locked(TEST_REQUIREMENTS + BUILD_REQUIREMENTS))
    session.run("python", "tools/dev.py", "develop")
    stamp.write_text(fingerprint)


def _locked(names: list[str]) -> list[str]:
    """Requirements pinned to poetry.lock's versions (a name it does not lock stays bare)."""
    lock = tomllib.loads((ROOT / "poetry.lock").read_text())
    versions = {package["name"]: package["version"] for package in lock["package"]}
    return [f"{name}=={versions[name]}" if name in versions else name for name in names]


def _find_pyenv_pythons() -> None:
    """Puts pyenv's newest 3.12 and 3.13 on PATH for nox when `python3.X` is not on it (pyenv's
    shim of a version that is not selected does not count: it refuses to run)."""
    if shutil.which("pyenv") is None:
        return
    run = subprocess.run(["pyenv", "root"], capture_output=True, text=True, check=False)
    versions = Path(run.stdout.strip()) / "versions"
    shims = Path(run.stdout.strip()) / "shims"
    found = []
    for version in OTHER_PYTHONS:
        on_path = shutil.which(f"python{version}")
        if on_path is not None and Path(on_path).parent != shims:
            continue
        candidates = [
            p for p in versions.glob(f"{version}.*") if (p / "bin" / f"python{version}").is_file()
        ]
        if candidates:
            newest = max(
                candidates, key=lambda p: [int(x) for x in p.name.split(".") if x.isdigit()]
            )
            found.append(str(newest / "bin"))
    if found:
        os.environ["PATH"] = os.pathsep.join([*found, os.environ.get("PATH", "")])


_find_pyenv_pythons()


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


# Packaging and cross-version compatibility (docs/compatibility.md).

DIST = ROOT / "dist"
COMPAT_WORK = ROOT / "build" / "compat"
# Earlier versions the conformance kit runs against, one commit per line (`nox -s compat`).
COMPAT_REFS = [
    "4f671fe",  # v0.1.0-foundation: the service before the client library
    "70f5eeb",  # the client library (Backend.SYSTEM apps), before the .pyx build hook
]


@nox.session(venv_backend="venv", reuse_venv=True)
def build(session: nox.Session) -> None:
    """An sdist and a wheel of every package into dist/, each with its declared backend."""
    _build_dists(session, ROOT, DIST)


@nox.session(venv_backend="venv", reuse_venv=True)
def install_check(session: nox.Session) -> None:
    """Builds dist/, then installs perfetto-client, -service, -cmd and -heapprofd each alone
    and uses them."""
    _build_dists(session, ROOT, DIST)
    session.run(sys.executable, "tools/install_check.py", str(DIST), external=True)


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


def _build_dists(session: nox.Session, tree: Path, out: Path) -> None:
    session.install("build")
    shutil.rmtree(out, ignore_errors=True)
    session.run(
        "python", str(ROOT / "tools" / "dists.py"), "build", str(out), "--source", str(tree)
    )


def _compat_venv(session: nox.Session, tree: Path, work: Path) -> Path:
    """Builds `tree` into work/dist and installs its service (and client) into work/venv."""
    dists = work / "dist"
    _build_dists(session, tree, dists)
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
