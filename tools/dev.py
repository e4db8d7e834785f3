#!/usr/bin/env python3
"""Sets up the development environment from nothing but python3, then runs a command in it.

    python3 tools/dev.py test          build the compiled modules in place, then lint, typecheck,
                                       protos_check and layers; the exclusive tests; then in two
                                       lanes side by side (TEST_PHASES): all tests on 3.11
                                       (compiled in one, pure in the other), the compiled suites
                                       on 3.12 and 3.13 (tests_on), install_check on all three
                                       and compat; each phase's and lane's wall and
                                       CPU time printed
    python3 tools/dev.py nox [ARGS]    any nox session, e.g. `nox -s bench`
    python3 tools/dev.py run CMD...    any command inside the project environment
    python3 tools/dev.py develop       install every package in develop mode into the running
                                       Python's environment (the nox sessions' per-version venvs)
    python3 tools/dev.py trace SCRIPT [ARGS...]
                                       record SCRIPT with `perfetto-trace run`, run in the
                                       current directory (trace.pftrace there)

The project lives in `.venv/`. `trace` installs there only what recording needs (perfetto-client
and the packages below it, in develop mode, the client compiled); every other command installs
every package and the dev tools, with poetry (itself in `.tools/`). The install step is skipped
while the pyproject files and poetry.lock are unchanged.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import threading
import time
import tomllib
import venv
from pathlib import Path
from typing import Any

from package_graph import build_backend, closure, packages, requirement_name, support_package

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ROOT / ".tools"
POETRY_SPEC = "poetry>=2.1,<3"
# What `test` runs after building the compiled modules in place: phases in this order, each
# once the ones before it passed, each timed. A phase's lanes run side by side (nox processes
# whose sessions share no files; every line is prefixed with its lane); a lane's sessions run
# one after the other. `NAME@X.Y` selects the sessions NAME of Python X.Y.
TEST_PHASES: list[tuple[str, dict[str, list[str]]]] = [
    ("checks", {"checks": ["lint", "typecheck", "protos_check", "layers"]}),
    # Tests that change the machine for every process (a CPU taken offline): nothing beside.
    ("tests that run alone", {"alone": ["exclusive_tests"]}),
    # Every other session in two lanes side by side, with no phase's end between them: one
    # lane's worker start-ups, downloads and last long tests overlap the other lane's work. All
    # tests on 3.11, in one pytest session each, compiled in one lane and pure in the other; then
    # all compiled tests of 3.12 in one and of 3.13 in the other (each version's session makes
    # its venv and compiles every module for it first); then each version's built wheels
    # installed alone (install_check: on 3.11 with the installed test suites) and the
    # conformance kit against earlier versions (compat, its builds in a builder venv of its
    # own). 3.11's install_check (about 5 min) and compat (about 3) sit where they balance the
    # lanes: a clean-clone run took A 38.7 and B 32.8 min with them the other way round. A
    # wheel's compiled modules come from the build cache (PERFETTO_BUILD_CACHE), which that
    # version's in-place build filled before.
    (
        "tests, packaging and compatibility",
        {
            "A": ["suite(build='compiled')", "suite_on@3.12", "install_check@3.12", "compat"],
            "B": [
                "suite(build='pure')",
                "suite_on@3.13",
                "install_check@3.13",
                "install_check@3.11",
            ],
        },
    ),
]
# Installed in develop mode in the package graph's order (tools/package_graph.py), without
# build isolation: a package's build cimports the `.pxd` files of the siblings installed before
# it (its build-system.requires names them, and poetry's isolated builds cannot find them: no
# index holds them).
GRAPH = packages(ROOT)
TEST_SUPPORT = str(support_package(ROOT).relative_to(ROOT))
# The packages, then what their tests share.
DEVELOP_ORDER = [*(str(p.directory.relative_to(ROOT)) for p in GRAPH), TEST_SUPPORT]
# What `trace` installs: perfetto-trace's package and those below it, compiling only the first
# (its recorder; a first trace from a fresh clone took 168 s of CPU compiling them all, 62 s
# compiling this one); the others run as pure Python until `tools/build_native.py` (which
# `test` runs first) compiles them.
_CLIENT = next(p for p in GRAPH if p.distribution == "perfetto-client")
_TRACE_CLOSURE = closure(_CLIENT, GRAPH) | set(_CLIENT.build_requires)
TRACE_PACKAGES = [
    str(p.directory.relative_to(ROOT)) for p in GRAPH if p.distribution in _TRACE_CLOSURE
]
TRACE_COMPILED = [str(_CLIENT.directory.relative_to(ROOT))]


def _backend() -> Path:
    directory = build_backend(ROOT)
    assert directory is not None, "pyproject.toml names no [tool.perfetto] build-backend"
    return directory


# The build backend the compiled packages name, installed (in develop mode) before them.
BACKEND = _backend()
VENV = ROOT / ".venv"
BUILD_CACHE = ROOT / "build" / "native-cache"
"""Where perfetto_build keeps the compiled modules it built (PERFETTO_BUILD_CACHE)."""
# The fingerprint of the pyproject files and the lock each install was made for.
TRACE_STAMP = VENV / ".dev-trace-installed"
FULL_STAMP = VENV / ".dev-installed"


def _bin(env: Path, name: str) -> Path:
    return env / ("Scripts" if os.name == "nt" else "bin") / name


def _env() -> dict[str, str]:
    env = dict(os.environ)
    # Compiled modules shared by the in-place builds and the wheels of each Python version.
    env.setdefault("PERFETTO_BUILD_CACHE", str(BUILD_CACHE))
    env["POETRY_VIRTUALENVS_IN_PROJECT"] = "true"
    env["POETRY_NO_INTERACTION"] = "1"
    env.pop("VIRTUAL_ENV", None)
    return env


def _package_files() -> list[Path]:
    """The pyproject.toml of every package of the monorepo."""
    projects = [BACKEND, *(p.directory for p in GRAPH), ROOT / TEST_SUPPORT]
    return [directory / "pyproject.toml" for directory in projects]


def _distributions() -> list[str]:
    """The distribution names of the monorepo's packages and its build backend."""
    return [tomllib.loads(f.read_text())["project"]["name"] for f in _package_files()]


def _fingerprint() -> str:
    digest = hashlib.sha256()
    for path in [ROOT / "pyproject.toml", *_package_files(), ROOT / "poetry.lock"]:
        if path.exists():
            digest.update(str(path.relative_to(ROOT)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


SYSTEM_PACKAGES = {
    "libdw-dev": Path("/usr/include/elfutils/libdwfl.h"),
    "chromium": Path("/usr/bin/chromium"),
}
"""Debian packages the full build and tests need (elfutils' libdw: heapprofd's native unwinder;
Chromium: the browser tests of the HTML reports), each with a file that tells whether it is
installed."""


def ensure_system_packages() -> None:
    """Installs the missing SYSTEM_PACKAGES with apt-get when running as root where it exists
    (CI's machines); elsewhere the build goes on without them (docs/heapprofd.md)."""
    missing = [name for name, marker in SYSTEM_PACKAGES.items() if not marker.exists()]
    if not missing or os.geteuid() != 0 or shutil.which("apt-get") is None:
        return
    print(f"dev: installing {' '.join(missing)} with apt-get", flush=True)
    quiet = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], env=quiet, check=True)
    subprocess.run(["apt-get", "install", "-y", "-qq", *missing], env=quiet, check=True)


def _poetry() -> Path:
    """Poetry, installed into `.tools` if it is not there."""
    poetry = _bin(TOOLS, "poetry")
    if not poetry.exists():
        print("dev: installing poetry into .tools/", flush=True)
        venv.create(TOOLS, with_pip=True, clear=True)
        pip = [str(_bin(TOOLS, "python")), "-m", "pip", "install", "-q"]
        subprocess.run([*pip, "--upgrade", "pip"], check=True)
        subprocess.run([*pip, POETRY_SPEC], check=True)
    return poetry


def ensure_environment(full: bool = True) -> None:
    """Brings `.venv` up to date: with `full`, every package in develop mode and the dev tools
    (poetry.lock); without, only TRACE_PACKAGES and what they need."""
    fingerprint = _fingerprint()

    def current(stamp: Path) -> bool:
        return stamp.is_file() and stamp.read_text() == fingerprint

    if current(FULL_STAMP) or (not full and current(TRACE_STAMP)):
        return
    python = _bin(VENV, "python")
    if current(TRACE_STAMP):  # `trace` installed these for this fingerprint: the rest only
        packages = [p for p in DEVELOP_ORDER if p not in TRACE_PACKAGES]
    else:
        if python.exists():
            # A path package whose version did not change is not reinstalled, even when its
            # scripts or entry points did: uninstall ours so that they install anew.
            uninstall = [str(python), "-m", "pip", "uninstall", "-q", "-y", *_distributions()]
            subprocess.run(uninstall, cwd=ROOT, env=_env(), check=False)
            FULL_STAMP.unlink(missing_ok=True)
            TRACE_STAMP.unlink(missing_ok=True)
        else:
            print("dev: creating .venv/", flush=True)
            venv.create(VENV, with_pip=True)
        packages = DEVELOP_ORDER if full else TRACE_PACKAGES
    poetry = _poetry() if full else None
    compiled = packages if full else TRACE_COMPILED
    pure = [p for p in packages if p not in compiled]
    print(f"dev: installing {_listed(packages)} into .venv/ (develop mode)", flush=True)
    if pure:
        print(
            f"dev: compiling {_listed(compiled)} only: {_listed(pure)} run as pure Python until"
            " `python3 tools/dev.py test` (or tools/build_native.py) compiles them",
            flush=True,
        )
    develop_install(python, packages, compiled)
    if not full:
        TRACE_STAMP.write_text(fingerprint)
        return
    assert poetry is not None
    print("dev: installing the dev tools into .venv/", flush=True)
    # Poetry leaves a path package alone that is installed at its version.
    subprocess.run([str(poetry), "install"], cwd=ROOT, env=_env(), check=True)
    TRACE_STAMP.write_text(fingerprint)
    FULL_STAMP.write_text(fingerprint)


def _listed(packages: list[str]) -> str:
    return ", ".join(Path(p).name for p in packages)


def locked(requirements: list[str]) -> list[str]:
    """Requirements pinned to poetry.lock's versions (one it does not lock stays as it is)."""
    lock = tomllib.loads((ROOT / "poetry.lock").read_text())
    versions = {package["name"]: package["version"] for package in lock["package"]}
    pinned = []
    for requirement in requirements:
        name = requirement_name(requirement)
        pinned.append(f"{name}=={versions[name]}" if name in versions else requirement)
    return pinned


def _third_party_dependencies(packages: list[str]) -> list[str]:
    """The names of the distributions `packages` depend on, other than ours."""
    projects = [tomllib.loads((ROOT / p / "pyproject.toml").read_text()) for p in packages]
    ours = set(_distributions())
    names = {requirement_name(r) for p in projects for r in p["project"].get("dependencies", [])}
    return sorted(names - ours)


def develop_install(
    python: Path, packages: list[str] = DEVELOP_ORDER, compiled: list[str] = DEVELOP_ORDER
) -> None:
    """Installs the build backend, then `packages` (DEVELOP_ORDER's, in its order) in develop
    mode into the environment of `python`, each after what it cimports, those of `compiled`
    compiled there (perfetto_build); their build requirements and third-party dependencies at
    poetry.lock's versions."""
    pip = [str(python), "-m", "pip", "install", "-q"]
    backend = tomllib.loads((BACKEND / "pyproject.toml").read_text())["project"]
    requirements = locked(backend["dependencies"] + _third_party_dependencies(packages))
    subprocess.run([*pip, *requirements], cwd=ROOT, env=_env(), check=True)
    develop = [*pip, "--no-build-isolation", "--no-deps", "-e"]
    subprocess.run([*develop, str(BACKEND)], cwd=ROOT, env=_env(), check=True)
    for package in packages:
        install = [*develop, package]
        env = _env() if package in compiled else {**_env(), "PERFETTO_PY_NO_BUILD": "1"}
        subprocess.run(install, cwd=ROOT, env=env, check=True)


def _venv_env() -> dict[str, str]:
    """The environment of a command run in the project's virtual environment."""
    env = _env()
    venv_dir = ROOT / ".venv"
    env["VIRTUAL_ENV"] = str(venv_dir)
    env["PATH"] = str(_bin(venv_dir, "")) + os.pathsep + env.get("PATH", "")
    return env


def run(cmd: list[str], cwd: Path = ROOT) -> int:
    """Runs `cmd` in `cwd` with the project's virtual environment first on PATH."""
    return subprocess.run(cmd, cwd=cwd, env=_venv_env(), check=False).returncode


def _nox_sessions(selectors: list[str]) -> list[str]:
    """The nox sessions `selectors` name: `NAME` as it is, `NAME@X.Y` as NAME's sessions whose
    `python` parameter is X.Y."""
    listing: list[dict[str, Any]] = []
    named = sorted({s.partition("@")[0] for s in selectors if "@" in s})
    if named:
        # Named with -s: a bare `nox -l` lists only the default sessions.
        listed = subprocess.run(
            ["nox", "-l", "--json", "-s", *named],
            cwd=ROOT,
            env=_venv_env(),
            capture_output=True,
            check=True,
        )
        listing = json.loads(listed.stdout)
    sessions = []
    for selector in selectors:
        name, _, python = selector.partition("@")
        if not python:
            sessions.append(name)
            continue
        chosen = [
            s["session"]
            for s in listing
            if s["name"] == name and s["call_spec"].get("python") == python
        ]
        if not chosen:
            raise SystemExit(f"dev: no nox session {name} of Python {python}")
        sessions += chosen
    return sessions


def run_side_by_side(lanes: dict[str, list[str]], rest: list[str]) -> int:
    """Runs each lane's nox sessions (`_nox_sessions`) in a nox process of its own, the lanes
    side by side (`run_lanes`); the first failing lane's status, else 0."""
    if len(lanes) == 1:
        [selectors] = lanes.values()
        return run(["nox", "-s", *_nox_sessions(selectors), *rest])
    return run_lanes(
        {lane: ["nox", "-s", *_nox_sessions(selectors), *rest] for lane, selectors in lanes.items()}
    )


FAILURE_LINE = re.compile(r"FAILED |ERROR |nox > Session .* failed")
"""The lines that name what failed: pytest's short summary, nox's failed sessions."""


def run_lanes(commands: dict[str, list[str]]) -> int:
    """Runs the commands side by side, each line of their output prefixed with `[LANE]`; prints
    each lane's wall time and CPU time (its own and that of every process it waited for) as it
    ends, then the lines that name a failure (`FAILURE_LINE`) again, together; the first
    failing lane's status, else 0."""
    start = time.monotonic()
    running = {}
    failures: list[str] = []
    for lane, command in commands.items():
        process = subprocess.Popen(
            command,
            cwd=ROOT,
            env=_venv_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
        )
        relay = threading.Thread(target=_relay, args=(lane, process, failures), daemon=True)
        relay.start()
        running[process.pid] = (lane, process, relay)
    statuses = []
    while running:
        # Any child as it ends (the lanes are this process's only children here): wait4 gives
        # the CPU that Popen.wait does not.
        pid, wait_status, usage = os.wait4(-1, 0)
        if pid not in running:
            continue
        lane, process, relay = running.pop(pid)
        process.returncode = os.waitstatus_to_exitcode(wait_status)
        statuses.append(process.returncode)
        relay.join()
        cpu = usage.ru_utime + usage.ru_stime
        wall = time.monotonic() - start
        print(
            f"dev: lane {lane} ended after {wall / 60:.2f} min, {cpu / 60:.2f} CPU-min", flush=True
        )
    for line in failures:
        print(f"dev: failed: {line}", end="", flush=True)
    return next((status for status in statuses if status != 0), 0)


def _relay(lane: str, process: subprocess.Popen[str], failures: list[str]) -> None:
    """Prints the lane's output as it comes, keeping its failure lines in `failures`."""
    assert process.stdout is not None
    for line in process.stdout:
        print(f"[{lane}] {line}", end="", flush=True)
        if FAILURE_LINE.match(line):
            failures.append(f"[{lane}] {line}")


def _children_cpu() -> float:
    """CPU seconds (user and system) of every process this one has waited for."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def test(rest: list[str]) -> int:
    """`dev.py test`: the compiled modules built in place, then TEST_PHASES; prints each phase's
    wall and CPU time and, at the end, all of them with the shortest wall time the machine's
    cores allow for that much CPU."""
    took: list[tuple[str, float, float]] = []
    start, cpu = time.monotonic(), _children_cpu()
    status = run(["python", "tools/build_native.py"])
    took.append(
        ("build the compiled modules in place", time.monotonic() - start, _children_cpu() - cpu)
    )
    for phase, lanes in TEST_PHASES:
        if status != 0:
            break
        start, cpu = time.monotonic(), _children_cpu()
        status = run_side_by_side(lanes, rest)
        took.append((phase, time.monotonic() - start, _children_cpu() - cpu))
        print(f"dev: {phase} took {took[-1][1]:.0f} s", flush=True)
    for phase, seconds, cpu_seconds in took:
        print(f"dev: {seconds / 60:5.1f} min  {cpu_seconds / 60:5.1f} CPU-min  {phase}", flush=True)
    total = sum(seconds for _, seconds, _ in took)
    total_cpu = sum(cpu_seconds for _, _, cpu_seconds in took)
    cores = len(os.sched_getaffinity(0))
    print(
        f"dev: {total / 60:5.1f} min  {total_cpu / 60:5.1f} CPU-min  in all"
        f"{'' if status == 0 else ' (failed)'}; {cores} cores cannot take that CPU below"
        f" {total_cpu / cores / 60:.1f} min",
        flush=True,
    )
    return status


def main(argv: list[str]) -> int:
    if not argv or argv[0] in {"-h", "--help"}:
        print(__doc__)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command == "develop":  # for the nox sessions of other Python versions: no poetry there
        develop_install(Path(sys.executable))
        return 0
    if command == "test":
        ensure_system_packages()
    ensure_environment(full=command != "trace")
    if command == "test":
        return test(rest)
    if command == "nox":
        return run(["nox", *rest])
    if command == "run":
        return run(rest)
    if command == "trace":
        built = run(["python", "tools/build_native.py", *TRACE_COMPILED])
        if built != 0:
            return built
        # The program runs where the caller is; the trace lands there too.
        return run(["python", "-m", "perfetto_client._tracer", "run", *rest], cwd=Path.cwd())
    print(f"dev: unknown command {command!r}; see `python3 tools/dev.py --help`", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
