#!/usr/bin/env python3
"""Generates the Python code of `perfetto_protos` from the `.proto` files under `protos/perfetto/`.

    python tools/gen_protos.py           regenerate protos/src/perfetto_protos/<subpackages>
    python tools/gen_protos.py --check   fail, listing files, if the committed code is stale

For `protos/perfetto/X/Y.proto` it writes `perfetto_protos/X/Y_pb2.py` (protobuf),
`Y_pb2.pyi` (mypy-protobuf stubs) and `Y_pbzero.py` (ProtoZero writers, from
`python -m protozero.codegen`; with a `Y_pbzero.pxd` for the files of COMPILED), the field
tags of every message and the values of every enum (`perfetto_protos/tags/fields.py` and
`fields_c.pxd`, TAGS), plus an `__init__.py` in every generated directory.

The `_pb2` modules register their files in `perfetto_protos._pool.POOL`, not in protobuf's
default pool: upstream's `perfetto` package registers the same full names
(`perfetto.protos.*`) there, and a program may import both.

Every subdirectory of `protos/src/perfetto_protos/` is generated and owned by this script;
the files directly in `perfetto_protos/` are hand-written and left alone.
"""

from __future__ import annotations

import argparse
import filecmp
import importlib.util
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "protos"
SOURCE_PREFIX = "perfetto"
PACKAGE = "perfetto_protos"
OUT_DIR = PROTO_ROOT / "src" / PACKAGE
DESCRIPTOR_SET = "descriptor_set.pb"
# protoc's `_pb2` modules add their file to the default pool; ours add it to our own.
DEFAULT_POOL_CALL = "_descriptor_pool.Default().AddSerializedFile("
OWN_POOL_CALL = "_perfetto_pool.POOL.AddSerializedFile("
POOL_IMPORT_AFTER = "from google.protobuf.internal import builder as _builder\n"
POOL_IMPORT = f"from {PACKAGE} import _pool as _perfetto_pool\n"
INIT_TEXT = '"""Generated from protos/{path}/ by tools/gen_protos.py; do not edit."""\n'
COMPILED = [
    "perfetto/trace/trace_packet.proto",
    "perfetto/trace/track_event/track_event.proto",
    "perfetto/trace/track_event/debug_annotation.proto",
]
"""The files whose ProtoZero writers also get a `.pxd`: compiled where perfetto-protos is built
with Cython (the hot ones: compiling all would take minutes of each wheel build)."""

TAGS = "tags/fields"
"""The field numbers and tags of every message and the values of every enum:
`perfetto_protos/tags/fields.py` (the pure build's) and `fields_c.pxd` (C constants the compiled
modules of every package cimport)."""


def proto_files() -> list[str]:
    """Every .proto source, as a path relative to the proto root, in a stable order."""
    base = PROTO_ROOT / SOURCE_PREFIX
    return sorted(p.relative_to(PROTO_ROOT).as_posix() for p in base.rglob("*.proto"))


def _top_dirs(files: list[str]) -> list[str]:
    return sorted({f.split("/")[1] for f in files})


def _rewrite(text: str, top_dirs: list[str]) -> str:
    """Points `perfetto.<dir>` module references at `perfetto_protos.<dir>`."""
    pattern = re.compile(r"\b" + SOURCE_PREFIX + r"\.(?=(?:" + "|".join(top_dirs) + r")\b)")
    return pattern.sub(PACKAGE + ".", text)


def _own_pool(text: str, name: str) -> str:
    """Makes a generated `_pb2` module register its file in perfetto_protos' own pool."""
    if text.count(DEFAULT_POOL_CALL) != 1 or text.count(POOL_IMPORT_AFTER) != 1:
        sys.exit(f"gen_protos: {name} does not look like protoc's output any more")
    text = text.replace(DEFAULT_POOL_CALL, OWN_POOL_CALL)
    return text.replace(POOL_IMPORT_AFTER, POOL_IMPORT_AFTER + POOL_IMPORT)


def _run_protoc(files: list[str], work: Path) -> Path:
    spec = importlib.util.find_spec("grpc_tools")
    if spec is None or spec.origin is None:
        sys.exit("gen_protos: grpcio-tools is not installed in this environment")
    well_known = Path(spec.origin).parent / "_proto"
    plugin = Path(sys.executable).parent / "protoc-gen-mypy"
    if not plugin.exists():
        sys.exit(f"gen_protos: {plugin} not found; install mypy-protobuf into this environment")
    raw = work / "raw"
    raw.mkdir()
    descriptor_set = work / DESCRIPTOR_SET
    cmd = [
        sys.executable,
        "-m",
        "grpc_tools.protoc",
        f"--proto_path={PROTO_ROOT}",
        f"--proto_path={well_known}",
        f"--plugin=protoc-gen-mypy={plugin}",
        f"--python_out={raw}",
        f"--mypy_out={raw}",
        f"--descriptor_set_out={descriptor_set}",
        "--include_imports",
        *files,
    ]
    result = subprocess.run(cmd, cwd=PROTO_ROOT, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        sys.exit(f"gen_protos: protoc failed:\n{result.stderr}")
    return raw


def _run_pbzero(descriptor_set: Path, out: Path) -> None:
    if importlib.util.find_spec("protozero.codegen") is None:
        sys.exit("gen_protos: protozero.codegen is not importable; install packages/protozero")
    cmd = [
        sys.executable,
        "-m",
        "protozero.codegen",
        str(descriptor_set),
        str(out),
        "--strip-prefix",
        f"{SOURCE_PREFIX}/",
        "--package",
        PACKAGE,
        *(f"--compiled={name}" for name in COMPILED),
        f"--tags={TAGS}",
    ]
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        sys.exit(f"gen_protos: protozero.codegen failed:\n{result.stderr}")


def generate(out: Path) -> None:
    """Writes the complete generated tree into `out` (which must be empty or absent)."""
    files = proto_files()
    if not files:
        sys.exit(f"gen_protos: no .proto files under {PROTO_ROOT / SOURCE_PREFIX}")
    top_dirs = _top_dirs(files)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="gen_protos_") as tmp:
        work = Path(tmp)
        raw = _run_protoc(files, work)
        for src in sorted((raw / SOURCE_PREFIX).rglob("*")):
            if src.is_dir():
                continue
            rel = src.relative_to(raw / SOURCE_PREFIX)
            dest = out / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            text = _rewrite(src.read_text(encoding="utf-8"), top_dirs)
            if src.name.endswith("_pb2.py"):
                text = _own_pool(text, rel.as_posix())
            dest.write_text(text, encoding="utf-8")
        _run_pbzero(work / DESCRIPTOR_SET, out)
    for directory in sorted(p for p in out.rglob("*") if p.is_dir()):
        subdir = directory.relative_to(out).as_posix()
        (directory / "__init__.py").write_text(
            INIT_TEXT.format(path=f"{SOURCE_PREFIX}/{subdir}"), encoding="utf-8"
        )


def _generated_files(base: Path) -> set[str]:
    return {
        p.relative_to(base).as_posix()
        for sub in base.iterdir()
        if sub.is_dir() and sub.name != "__pycache__"
        for p in sub.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".so")
    }


def diff(fresh: Path, committed: Path) -> list[str]:
    """Lines describing every difference between a fresh generation and the committed tree."""
    new, old = _generated_files(fresh), _generated_files(committed)
    problems = [f"missing: {p}" for p in sorted(new - old)]
    problems += [f"extra: {p}" for p in sorted(old - new)]
    problems += [
        f"changed: {p}"
        for p in sorted(new & old)
        if not filecmp.cmp(fresh / p, committed / p, shallow=False)
    ]
    return problems


def install(fresh: Path) -> None:
    """Replaces every generated subpackage of OUT_DIR with the ones in `fresh`."""
    for sub in sorted(OUT_DIR.iterdir()):
        if sub.is_dir():
            shutil.rmtree(sub)
    for sub in sorted(fresh.iterdir()):
        shutil.copytree(sub, OUT_DIR / sub.name)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--check", action="store_true", help="compare with the committed code, write nothing"
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="gen_protos_out_") as tmp:
        fresh = Path(tmp) / PACKAGE
        generate(fresh)
        if args.check:
            problems = diff(fresh, OUT_DIR)
            if problems:
                print(f"gen_protos: {OUT_DIR.relative_to(ROOT)} is stale; run `nox -s protos`:")
                print("\n".join(f"  {line}" for line in problems))
                return 1
            print(f"gen_protos: {OUT_DIR.relative_to(ROOT)} is up to date")
            return 0
        install(fresh)
    print(f"gen_protos: {len(proto_files())} .proto files -> {OUT_DIR.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
