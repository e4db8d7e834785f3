"""Developer sessions. They run inside the project environment that `tools/dev.py` installs.

Run them through `python3 tools/dev.py nox -s NAME` (or `nox -s NAME` inside `.venv`).
"""

from __future__ import annotations

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

nox.options.default_venv_backend = "none"
nox.options.sessions = ["lint", "typecheck", "protos_check", "layers", "tests"]
nox.options.error_on_missing_interpreters = True


@nox.session(python=False)
def lint(session: nox.Session) -> None:
    """Ruff lint and format check over the whole tree."""
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session(python=False)
@nox.parametrize("package", ["repo", *PACKAGE_DIRS])
def typecheck(session: nox.Session, package: str) -> None:
    """mypy --strict over one package (sources, tests, benchmarks); `repo` = tools and tests/."""
    if package == "repo":
        targets = ["noxfile.py", "tools", "tests"]
    else:
        path = PACKAGE_DIRS[package]
        dirs = (path / "src", path / "tests", path / "benchmarks")
        targets = [str(p) for p in dirs if any(p.rglob("*.py"))]
    session.run("mypy", "--strict", *targets)


@nox.session(python=False)
@nox.parametrize("package", ["repo", *TESTED])
def tests(session: nox.Session, package: str) -> None:
    """pytest for one package (`repo` = the repository-wide checks in tests/)."""
    path = ROOT / "tests" if package == "repo" else PACKAGE_DIRS[package] / "tests"
    session.run("pytest", str(path), *session.posargs)


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
    """Fails if a package imports a package that is not below it in DESIGN.md's table."""
    session.run("python", "tools/check_layers.py")


@nox.session(python=False)
def bench(session: nox.Session) -> None:
    """Runs every package's benchmarks; each prints ratios against a reference run alongside."""
    scripts = sorted(ROOT.glob("packages/*/benchmarks/bench_*.py"))
    if not scripts:
        session.error("no benchmarks found")
    for script in scripts:
        session.run("python", str(script), *session.posargs)
