#!/usr/bin/env python3
"""Installs each user-facing package alone from built distributions and checks it as a user would.

    python tools/install_check.py [--python INTERPRETER] [--no-tests] DIST [PACKAGE...]

For each package (default: those with console scripts, the package graph's user-facing ones:
perfetto-client, -service, -cmd, -heapprofd), in a fresh venv of
INTERPRETER (default: the running one) in an empty directory: installs it from DIST
(siblings from DIST, the rest from the index), checks that exactly the distributions it
declares (transitively) got installed, that every installed perfetto module ships `py.typed`
and is imported from the venv, that each wheel ships exactly the compiled modules its source
declares (the same on every Python version) and that they load compiled, that the console
scripts are there, runs what a user of that package runs first (`traced` and a producer and a
consumer; the client's track-event example and `perfetto-trace run`; `perfetto --version`;
`heap_profile --version` and `heap_profile` on the heap profiling example), then, unless
`--no-tests`, the package's own tests against the installed code. Prints one
`install_check:` line per check; exits 1 on a failure.
"""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import tomllib
from importlib.metadata import version
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from build_native import compiled_module_names
from dists import installed_distributions, make_venv
from package_graph import packages, support_package

ROOT = Path(__file__).resolve().parent.parent
GRAPH = packages(ROOT)
SOURCES = {p.distribution: p.directory for p in GRAPH if p.scripts}
ALWAYS_PRESENT = {"pip", "setuptools", "wheel"}
TEST_TOOLS = (
    "pytest",
    "pytest-timeout",
    "pytest-xdist",
    "hypothesis",
    "perfetto",
    "opentelemetry-sdk",
    "playwright",  # the HTML reports' browser tests, with Debian's Chromium (never downloaded)
)
TIMEOUT = 60.0

# Run inside the installed venv: every perfetto distribution's modules, files and scripts.
_INSPECT = """
import importlib, importlib.metadata as m, json, sys
found = {}
for dist in m.distributions():
    name = dist.metadata["Name"]
    if not name.startswith("perfetto-"):
        continue
    top = (dist.read_text("top_level.txt") or "").split()
    files = [str(f) for f in dist.files or []]
    modules = sorted({f.split("/")[0] for f in files if f.endswith("/__init__.py")} | set(top))
    found[name] = {
        "requires": dist.requires or [],
        "modules": {mod: importlib.import_module(mod).__file__ for mod in modules},
        "typed": sorted(f.split("/")[0] for f in files if f.endswith("/py.typed")),
        "scripts": [ep.name for ep in dist.entry_points if ep.group == "console_scripts"],
        "compiled": {
            f.split(".")[0].replace("/", "."): importlib.import_module(
                f.split(".")[0].replace("/", ".")
            ).__file__
            for f in files
            if f.endswith(".so") and ".cpython-" in f
        },
        "libraries": sorted(
            f.rsplit("/", 1)[-1] for f in files if f.endswith(".so") and ".cpython-" not in f
        ),
    }
print(json.dumps(found))
"""


class CheckError(Exception):
    """One check of one package failed."""


def say(package: str, message: str) -> None:
    print(f"install_check: {package}: {message}", flush=True)


def requirement_name(requirement: str) -> str | None:
    """The distribution a Requires-Dist line names; None for an extra's requirement."""
    if "extra ==" in requirement:
        return None
    match = re.match(r"[A-Za-z0-9._-]+", requirement)
    assert match is not None, requirement
    return match.group(0).lower().replace("_", "-")


def closure(python: Path, root: str) -> set[str]:
    """The distributions `root` needs, following the Requires-Dist of what is installed."""
    script = (
        "import importlib.metadata as m, json, sys\n"
        "print(json.dumps({d.metadata['Name'].lower().replace('_', '-'): d.requires or []"
        " for d in m.distributions()}))\n"
    )
    output = subprocess.run(
        [str(python), "-c", script], check=False, capture_output=True, text=True
    )
    requires: dict[str, list[str]] = json.loads(output.stdout)
    needed, stack = set(), [root]
    while stack:
        name = stack.pop()
        if name in needed:
            continue
        needed.add(name)
        for requirement in requires.get(name, []):
            dep = requirement_name(requirement)
            if dep is not None:
                stack.append(dep)
    return needed


def check_install(package: str, python: Path, venv: Path) -> None:
    installed = set(installed_distributions(python)) - ALWAYS_PRESENT
    needed = closure(python, package)
    if installed != needed:
        raise CheckError(f"installed {sorted(installed)}, declared {sorted(needed)}")
    say(package, f"installs exactly what it declares: {', '.join(sorted(installed))}")
    output = subprocess.run(
        [str(python), "-c", _INSPECT], check=False, capture_output=True, text=True, cwd=venv.parent
    )
    if output.returncode != 0:
        raise CheckError(f"cannot import the installed modules: {output.stderr.strip()}")
    found: dict[str, dict[str, Any]] = json.loads(output.stdout)
    for name, info in sorted(found.items()):
        for module, path in info["modules"].items():
            if not str(path).startswith(str(venv)):
                raise CheckError(f"{module} imported from {path}, not from the venv")
            if module not in info["typed"]:
                raise CheckError(f"{name}: {module} ships no py.typed")
        source = _source_dir(name)
        declared = (
            tomllib.loads((source / "pyproject.toml").read_text())["project"].get("scripts", {})
            if source is not None
            else {}
        )
        missing = [s for s in declared if not (venv / "bin" / s).is_file()]
        if missing or sorted(declared) != sorted(info["scripts"]):
            raise CheckError(f"{name}: console scripts {info['scripts']}, declared {declared}")
    say(package, "modules import from the venv, ship py.typed; console scripts present")
    counts = []
    for name, info in sorted(found.items()):
        source = _source_dir(name)
        declared = set(compiled_module_names(source)) if source is not None else set()
        shipped = set(info["compiled"])
        if shipped != declared:
            missing, extra = sorted(declared - shipped), sorted(shipped - declared)
            raise CheckError(f"{name}: its wheel lacks the compiled {missing}, has {extra} besides")
        if declared:
            counts.append(f"{name} {len(declared)}")
        libraries = (
            sorted(f"{c.stem}.so" for c in (source / "src").rglob("lib*.c")) if source else []
        )
        if info["libraries"] != libraries:
            raise CheckError(
                f"{name}: its wheel has the libraries {info['libraries']}, not {libraries}"
            )
    compiled = {m: f for info in found.values() for m, f in info["compiled"].items()}
    pure = sorted(m for m, path in compiled.items() if not str(path).endswith(".so"))
    if pure:
        raise CheckError(f"compiled modules shipped but the pure ones loaded: {pure}")
    if compiled:
        names = ", ".join(sorted(compiled))
        say(package, f"{len(compiled)} compiled modules load ({', '.join(counts)}): {names}")


def _source_dir(name: str) -> Path | None:
    return next((p.directory for p in GRAPH if p.distribution == name), None)


def run_traced(package: str, venv: Path, work: Path) -> None:
    """Starts the installed `traced` on sockets in `work` and stops it."""
    env = dict(os.environ)
    env["PERFETTO_PRODUCER_SOCK_NAME"] = str(work / "producer.sock")
    env["PERFETTO_CONSUMER_SOCK_NAME"] = str(work / "consumer.sock")
    read_end, write_end = os.pipe()
    env["TRACED_NOTIFY_FD"] = str(write_end)
    process = subprocess.Popen(
        [str(venv / "bin" / "traced")],
        env=env,
        cwd=work,
        pass_fds=(write_end,),
        stderr=subprocess.PIPE,
    )
    os.close(write_end)
    try:
        ready, _, _ = select.select([read_end], [], [], TIMEOUT)
        if not ready or os.read(read_end, 1) != b"1":
            raise CheckError("traced did not start")
        process.send_signal(signal.SIGTERM)
        status = process.wait(TIMEOUT)
        if status != 0:
            raise CheckError(f"traced exited with {status} on SIGTERM")
    finally:
        os.close(read_end)
        process.kill()
        _, err = process.communicate()
    say(package, f"traced served its sockets and stopped cleanly{_tail(err)}")


def _tail(err: bytes) -> str:
    text = err.decode(errors="replace").strip()
    return f" (stderr: {text.splitlines()[-1]})" if text else ""


def run_example(package: str, python: Path, work: Path, example: Path) -> None:
    """Runs an example as a first-time user would and checks the trace it wrote."""
    from perfetto_protos.upstream import parse_upstream_trace

    what, command = f"examples/{example.name}", [str(example)]
    out = work / "example.pftrace"
    result = subprocess.run(
        [str(python), *command, str(out)], check=False, capture_output=True, text=True, cwd=work
    )
    if result.returncode != 0:
        raise CheckError(f"{what} failed: {result.stderr.strip()}")
    trace: Any = parse_upstream_trace(out.read_bytes())
    written = [p for p in trace.packet if p.HasField("for_testing") or p.HasField("track_event")]
    if not written:
        raise CheckError(f"{what} wrote a trace without its events")
    say(package, f"{what} recorded {len(written)} events ({len(trace.packet)} packets)")


def run_version(package: str, venv: Path, work: Path, script: str) -> None:
    """`SCRIPT --version`: the installed command runs and knows its version."""
    result = subprocess.run(
        [str(venv / "bin" / script), "--version"],
        check=False,
        capture_output=True,
        text=True,
        cwd=work,
    )
    expected = version_of(venv / "bin" / "python", package)
    if result.returncode != 0 or expected not in result.stdout:
        output = (result.stdout + result.stderr).strip()
        raise CheckError(f"{script} --version failed: {output}")
    say(package, f"{script} --version: {result.stdout.strip()}")


def run_perfetto_trace(package: str, venv: Path, work: Path) -> None:
    """`perfetto-trace run` records a program's calls with the compiled recorder."""
    from perfetto_protos.upstream import parse_upstream_trace

    (work / "prog.py").write_text("def work():\n    return 1\nwork()\n")
    out = work / "prog.pftrace"
    command = [str(venv / "bin" / "perfetto-trace"), "run", "-o", str(out), "prog.py"]
    result = subprocess.run(
        command, check=False, capture_output=True, text=True, cwd=work, timeout=TIMEOUT
    )
    wrote = [s for s in result.stderr.splitlines() if s.startswith("perfetto-trace: wrote")]
    summary = wrote[0] if wrote else ""
    if result.returncode != 0 or not out.is_file():
        raise CheckError(f"perfetto-trace run failed: {result.stderr.strip()}")
    if not summary.endswith("(compiled hook)"):
        raise CheckError(f"perfetto-trace run did not record compiled: {summary}")
    trace: Any = parse_upstream_trace(out.read_bytes())
    names = {n.name for p in trace.packet for n in p.interned_data.event_names}
    if "work" not in {name.split(".")[-1] for name in names}:
        raise CheckError(f"perfetto-trace run's trace lacks the call of work: {sorted(names)}")
    say(package, f"perfetto-trace run: {summary}")


def version_of(python: Path, distribution: str) -> str:
    """The version of `distribution` installed in the environment of `python`."""
    return installed_distributions(python)[distribution]


def run_heap_profile(package: str, venv: Path, work: Path) -> None:
    """`heap_profile` records the heap profiling example, starting its own traced and daemon."""
    from perfetto_protos.upstream import parse_upstream_trace

    env = dict(os.environ)
    env["PERFETTO_CONSUMER_SOCK_NAME"] = str(work / "no-traced-here")  # not a shared one
    env.pop("PERFETTO_PRODUCER_SOCK_NAME", None)
    env.pop("PERFETTO_HEAPPROFD_SOCK_NAME", None)
    example = ROOT / "examples" / "heap_profile_example.py"
    out = work / "heap.pftrace"
    command = [
        str(venv / "bin" / "heap_profile"),
        "-o",
        str(out),
        "--all-heaps",
        "--",
        str(example),
    ]
    result = subprocess.run(
        command, check=False, capture_output=True, text=True, cwd=work, env=env, timeout=300
    )
    if result.returncode != 0 or not out.is_file():
        raise CheckError(f"heap_profile failed: {result.stderr.strip()}")
    trace: Any = parse_upstream_trace(out.read_bytes())
    heaps = {
        dump.heap_name
        for packet in trace.packet
        if packet.HasField("profile_packet")
        for dump in packet.profile_packet.process_dumps
    }
    if not {"python", "connection_pool"} <= heaps:
        raise CheckError(f"heap_profile's trace holds the heaps {sorted(heaps)}")
    say(package, f"heap_profile recorded {example.name}: heaps {', '.join(sorted(heaps))}")


def run_tests(package: str, python: Path, work: Path) -> None:
    """Runs the package's tests, copied out of the tree, against the installed code."""
    source = SOURCES[package] / "tests"
    if not any(source.glob("test_*.py")):
        say(package, "has no tests yet")
        return
    tools = [f"{name}=={version(name)}" for name in TEST_TOOLS]
    # perfetto-testing (testing/): what every package's tests share, never published.
    support = str(support_package(ROOT))
    subprocess.run([str(python), "-m", "pip", "install", "-q", *tools, support], check=True)
    # The repository's layout without its sources: tests find the examples where they are.
    tests = work / "tree" / source.relative_to(ROOT)
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(source, tests, ignore=ignore)
    shutil.copytree(ROOT / "examples", work / "tree" / "examples", ignore=ignore)
    args = ["-q", "-p", "no:cacheprovider", "--timeout=300", "--rootdir", str(tests), str(tests)]
    args += ["-n", "auto", "--dist", "loadgroup"]  # as noxfile.py's PARALLEL
    result = subprocess.run(
        [str(python), "-m", "pytest", *args], check=False, cwd=work, capture_output=True, text=True
    )
    summary = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    if result.returncode != 0:
        print(result.stdout[-4000:], result.stderr[-2000:], sep="\n")
        raise CheckError(f"its tests failed against the installed code: {summary}")
    say(package, f"its tests pass against the installed code: {summary}")


def check(package: str, dists: Path, interpreter: str, tests: bool) -> None:
    with tempfile.TemporaryDirectory(prefix=f"install-check-{package}-") as directory:
        work = Path(directory)
        venv = work / "venv"
        python = make_venv(venv, dists, [package], interpreter)
        check_install(package, python, venv)
        if package == "perfetto-service":
            run_traced(package, venv, work)
            run_example(package, python, work, ROOT / "examples" / "producer_and_consumer.py")
        elif package == "perfetto-client":
            run_example(package, python, work, ROOT / "examples" / "track_events.py")
            run_perfetto_trace(package, venv, work)
        elif package == "perfetto-cmd":
            run_version(package, venv, work, "perfetto")
        elif package == "perfetto-heapprofd":
            run_version(package, venv, work, "heap_profile")
            run_heap_profile(package, venv, work)
        if tests:
            run_tests(package, python, work)


def main(argv: list[str]) -> int:
    interpreter = sys.executable
    if argv[:1] == ["--python"]:
        interpreter, argv = argv[1], argv[2:]
    tests = argv[:1] != ["--no-tests"]
    argv = argv[0 if tests else 1 :]
    dists = Path(argv[0]).resolve()
    failed = False
    for package in argv[1:] or list(SOURCES):
        try:
            check(package, dists, interpreter, tests)
        except CheckError as exc:
            say(package, f"FAILED: {exc}")
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
