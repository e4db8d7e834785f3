"""`heap_profile --native` names frames of stripped libraries: from `.symtab`, from the
MiniDebugInfo in `.gnu_debugdata`, else as `library+0xOFFSET`."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from hp_testlib import HeapDump
from test_heap_profile_cli import _heap_profile, _private_env
from test_native_heap import _native_dump, pytestmark  # noqa: F401 (skipped where it is)

VICTIM_C = r"""
#include <stdlib.h>
#include <string.h>

__attribute__((noinline)) static void *victim_hidden_alloc(size_t size) {
    void *block = malloc(size);
    memset(block, 1, size);
    return block;
}

void *victim_entry(size_t size) {
    void *block = victim_hidden_alloc(size);
    __asm__ volatile("" ::: "memory");  /* no tail call: victim_entry stays on the stack */
    return block;
}
"""

LOAD_PY = """
import ctypes
import sys

kept = []
for name in sys.argv[1:]:
    lib = ctypes.CDLL("./" + name)
    lib.victim_entry.restype = ctypes.c_void_p
    lib.victim_entry.argtypes = [ctypes.c_size_t]
    kept += [lib.victim_entry(1 << 20) for _ in range(8)]
print("kept", len(kept))
"""

SQLITE_PY = """
import sqlite3


def build():
    db = sqlite3.connect(":memory:")
    db.execute("create table t(a, b)")
    db.executemany("insert into t values (?, ?)", ((i, str(i) * 20) for i in range(20000)))
    db.execute("create index i on t(b)")
    return db


dbs = [build() for _ in range(3)]
print("built", len(dbs))
"""


def _run(argv: list[str], cwd: Path) -> str:
    return subprocess.run(argv, cwd=cwd, check=True, capture_output=True, text=True).stdout


def _symbol_range(library: Path, name: str) -> range:
    """The addresses of `name` in `library`'s .symtab (nm)."""
    for line in _run(["nm", "-S", str(library)], library.parent).splitlines():
        parts = line.split()
        if parts[-1] == name:
            start, size = int(parts[0], 16), int(parts[1], 16)
            return range(start, start + size)
    raise AssertionError(f"{name} not in {library}")


def _add_mini_debuginfo(library: Path) -> None:
    """GDB's MiniDebugInfo recipe: the .symtab's functions that .dynsym lacks, xz-compressed
    into .gnu_debugdata, and the library stripped."""
    work = library.parent
    dynamic = set(
        _run(["nm", "-D", "--format=posix", "--defined-only", library.name], work).split()
    )
    functions = [
        line.split()[0]
        for line in _run(
            ["nm", "--format=posix", "--defined-only", library.name], work
        ).splitlines()
        if line.split()[1] in ("T", "t") and line.split()[0] not in dynamic
    ]
    (work / "keep").write_text("\n".join(functions) + "\n")
    _run(["objcopy", "--only-keep-debug", library.name, "full.debug"], work)
    _run(["objcopy", "-S", "--remove-section", ".comment", "--keep-symbols=keep",
          "full.debug", "mini.debug"], work)  # fmt: skip
    _run(["xz", "-f", "mini.debug"], work)
    _run(["strip", "--strip-all", "-R", ".comment", library.name], work)
    _run(["objcopy", "--add-section", ".gnu_debugdata=mini.debug.xz", library.name], work)


def _frames_of(dump: HeapDump, library: str) -> list[tuple[str, int]]:
    """(function, live bytes) of each frame in `library` (by file name), over every stack."""
    found = []
    for stack, values in dump.samples:
        for function, path, _line in stack:
            if Path(path).name == library:
                found.append((function, values["allocated"] - values["freed"]))
    return found


@pytest.mark.skipif(
    not all(shutil.which(tool) for tool in ("gcc", "nm", "objcopy", "strip", "xz")),
    reason="needs gcc, nm, objcopy, strip and xz to build the libraries",
)
def test_stripped_library_frames_are_named(tmp_path: Path) -> None:
    (tmp_path / "victim.c").write_text(VICTIM_C)
    names = {"symtab": "libvsymtab.so", "mini": "libvmini.so", "stripped": "libvstripped.so"}
    for number, name in enumerate(names.values(), start=1):
        _run(["gcc", "-shared", "-fPIC", "-O0", f"-Wl,--build-id=0x{number:040x}",
              "-o", name, "victim.c"], tmp_path)  # fmt: skip
    hidden = _symbol_range(tmp_path / names["symtab"], "victim_hidden_alloc")
    _add_mini_debuginfo(tmp_path / names["mini"])
    _run(["strip", "--strip-all", names["stripped"]], tmp_path)
    for variant in ("mini", "stripped"):
        assert ".symtab" not in _run(["readelf", "-S", names[variant]], tmp_path)
    assert ".gnu_debugdata" in _run(["readelf", "-S", names["mini"]], tmp_path)
    (tmp_path / "load.py").write_text(LOAD_PY)

    result = _heap_profile(
        "--native", "-o", "t.pftrace", "--", "load.py", *names.values(),
        cwd=tmp_path, env=_private_env(tmp_path),
    )  # fmt: skip

    assert result.returncode == 0, result.stderr
    assert result.stdout == "kept 24\n"
    dump = _native_dump((tmp_path / "t.pftrace").read_bytes())
    kept = 8 << 20
    for variant in ("symtab", "mini"):
        frames = _frames_of(dump, names[variant])
        assert {function for function, _ in frames} == {"victim_entry", "victim_hidden_alloc"}
        assert sum(b for f, b in frames if f == "victim_hidden_alloc") == kept, variant
    frames = _frames_of(dump, names["stripped"])
    assert sum(b for f, b in frames if f == "victim_entry") == kept  # in .dynsym
    unnamed = [(f, b) for f, b in frames if f != "victim_entry"]
    assert sum(b for _, b in unnamed) == kept
    for function, _ in unnamed:
        match = re.fullmatch(r"libvstripped\.so\+0x([0-9a-f]+)", function)
        assert match is not None, function
        assert int(match.group(1), 16) in hidden  # its offset is in victim_hidden_alloc


def test_every_libsqlite3_frame_has_a_name(tmp_path: Path) -> None:
    (tmp_path / "db.py").write_text(SQLITE_PY)
    result = _heap_profile(
        "--native", "-o", "db.pftrace", "db.py", cwd=tmp_path, env=_private_env(tmp_path)
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "built 3\n"
    dump = _native_dump((tmp_path / "db.pftrace").read_bytes())
    frames = [
        function
        for stack, _ in dump.samples
        for function, path, _ in stack
        if Path(path).name.startswith("libsqlite3.so")
    ]
    assert frames, "no libsqlite3 frame: is the sqlite3 module linked to the system library?"
    assert all(frames), "a libsqlite3 frame has no name"
