"""`heap_profile --native`: malloc of native programs and C extensions, unwound by the daemon."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import heapprofd
import pytest
from heapprofd._preload import native_unavailable
from hp_testlib import HeapDump, heap_dumps
from test_heap_profile_cli import _heap_profile, _private_env

# CI installs what native profiling needs (tools/dev.py test): there it must not skip
pytestmark = pytest.mark.skipif(
    not os.environ.get("CI") and (shutil.which("gcc") is None or native_unavailable() is not None),
    reason=f"native profiling unavailable here: {native_unavailable()}",
)

LEAK_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

__attribute__((noinline)) void *leak(void) {
    void **blocks = malloc(20 * sizeof(void *));
    for (int i = 0; i < 20; i++) {
        blocks[i] = malloc(1 << 20);
        memset(blocks[i], 1, 1 << 20);
    }
    return blocks;
}

__attribute__((noinline)) void churn(void) {
    for (int i = 0; i < 20000; i++) {
        void *p = malloc(1000);
        memset(p, 2, 1000);
        free(p);
    }
}

int main(void) {
    void *kept = leak();
    churn();
    printf("kept %p\n", kept != NULL ? (void *)1 : NULL);
    return 0;
}
"""

CTYPES_PY = """
import ctypes

libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]


def alloc_native():
    return [libc.malloc(1 << 20) for _ in range(40)]


kept = alloc_native()
print("allocated", len(kept))
"""


def _native_dump(trace: bytes) -> HeapDump:
    dumps = [d for d in heap_dumps(trace) if d.heap_name == "libc.malloc"]
    assert len(dumps) == 1, [d.heap_name for d in heap_dumps(trace)]
    return dumps[0]


def _live(dump: HeapDump, function: str) -> int:
    totals = dump.totals(function)
    return totals.get("allocated", 0) - totals.get("freed", 0)


def test_a_c_program_shows_leak_and_main(tmp_path: Path) -> None:
    (tmp_path / "leak.c").write_text(LEAK_C)
    subprocess.run(["gcc", "-O0", "-o", "leak", "leak.c"], cwd=tmp_path, check=True)
    result = _heap_profile(
        "--native", "-o", "leak.pftrace", "--", "./leak", cwd=tmp_path, env=_private_env(tmp_path)
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "kept 0x1\n"
    assert "heap_profile: program exited with status 0\n" in result.stderr
    dump = _native_dump((tmp_path / "leak.pftrace").read_bytes())
    leaked = 20 << 20
    assert 0.95 * leaked <= _live(dump, "leak") <= 1.05 * leaked
    assert 0.95 * leaked <= _live(dump, "main") <= 1.1 * leaked
    stack = next(s for s, _ in dump.samples if any(f[0] == "leak" for f in s))
    names = [frame[0] for frame in stack]
    assert names.index("main") < names.index("leak") < names.index("malloc")  # root first
    assert stack[names.index("leak")][1] == str(tmp_path / "leak")
    churn = dump.totals("churn")
    assert churn["freed"] == churn["allocated"] > 0  # every sampled free was seen
    assert dump.flags["buffer_overran"] is False
    assert dump.flags["buffer_corrupted"] is False


def test_native_frames_carry_build_ids_and_mapping_ranges(tmp_path: Path) -> None:
    from perfetto_protos.upstream import parse_upstream_trace

    (tmp_path / "leak.c").write_text(LEAK_C)
    subprocess.run(
        ["gcc", "-O0", "-Wl,--build-id=sha1", "-o", "leak", "leak.c"], cwd=tmp_path, check=True
    )
    result = _heap_profile(
        "--native", "-o", "t.pftrace", "--", "./leak", cwd=tmp_path, env=_private_env(tmp_path)
    )
    assert result.returncode == 0, result.stderr
    build_id = (
        subprocess.run(
            ["readelf", "-n", "leak"], cwd=tmp_path, capture_output=True, text=True, check=True
        )
        .stdout.split("Build ID:")[1]
        .split()[0]
    )
    trace: Any = parse_upstream_trace((tmp_path / "t.pftrace").read_bytes())
    strings: dict[int, str] = {}
    found = []
    for packet in trace.packet:
        profile = packet.profile_packet
        strings.update((s.iid, s.str.decode()) for s in profile.strings)
        for m in profile.mappings:
            path = "/" + "/".join(strings[i] for i in m.path_string_ids)
            if path == str(tmp_path / "leak"):
                found.append((strings[m.build_id], m.start, m.end))
        for f in profile.frames:
            if strings.get(f.function_name_id) == "leak":
                assert 0 < f.rel_pc < 0x100000  # an address of the ELF file, not of the process
    assert found
    assert all(b == build_id and 0 < start < end for b, start, end in found)


def test_a_python_program_shows_alloc_native_over_ctypes(tmp_path: Path) -> None:
    (tmp_path / "prog.py").write_text(CTYPES_PY)
    result = _heap_profile(
        "--native", "-o", "py.pftrace", "prog.py", cwd=tmp_path, env=_private_env(tmp_path)
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "allocated 40\n"
    trace = (tmp_path / "py.pftrace").read_bytes()
    assert {d.heap_name for d in heap_dumps(trace)} >= {"python", "libc.malloc"}
    dump = _native_dump(trace)
    expected = 40 << 20
    assert 0.95 * expected <= _live(dump, "alloc_native") <= 1.05 * expected
    stack = next(s for s, _ in dump.samples if any(f[0] == "alloc_native" for f in s))
    paths = [frame[1] for frame in stack]
    position = next(i for i, f in enumerate(stack) if f[0] == "alloc_native")
    assert stack[position][1] == str(tmp_path / "prog.py")
    below = paths[position + 1 :]
    assert any("libffi" in p or "_ctypes" in p for p in below), below
    # the program's outermost frame is the root, as in the python heap: the interpreter's
    # native frames outside its evaluation loop (main, Py_RunMain) are not unwound
    roots = {s[0][0] for s, _ in dump.samples if any(f[0] == "alloc_native" for f in s)}
    assert roots == {"<module>"}, roots


SQLITE_PY = """
import sqlite3


def build(rows):
    db = sqlite3.connect(":memory:")
    db.execute("create table t(a, b)")
    db.executemany("insert into t values (?, ?)", ((i, str(i) * 20) for i in range(rows)))
    db.execute("create index i on t(b)")
    return db.execute("select count(*) from t where b > '5'").fetchone()


print("counted", [build(5000) for _ in range(3)])
"""


def test_every_sqlite_sample_reaches_its_python_frames(tmp_path: Path) -> None:
    """The daemon unwinds a sample with Python frames (in its ring reader, or in Python for a
    new one) down to the innermost evaluation loop: the program's Python frames root every
    stack through libsqlite3."""
    (tmp_path / "db.py").write_text(SQLITE_PY)
    result = _heap_profile(
        "--native", "-i", "1024", "-o", "db.pftrace", "db.py",
        cwd=tmp_path, env=_private_env(tmp_path),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("counted ")
    # Under load on 3.13 the trace once held a second libc.malloc dump beside the program's
    # (from_startup, one 3,264-byte allocation by the preload library): not this test's
    # subject, so the stacks are taken from the dump that holds the sqlite samples.
    dumps = [
        d
        for d in heap_dumps((tmp_path / "db.pftrace").read_bytes())
        if d.heap_name == "libc.malloc"
    ]
    stacks = [
        s for d in dumps for s, _ in d.samples if any("libsqlite3" in frame[1] for frame in s)
    ]
    assert len({d.pid for d in dumps if any(s in stacks for s, _ in d.samples)}) == 1
    assert len(stacks) > 20
    assert {stack[0][0] for stack in stacks} == {"<module>"}
    assert sum(any(frame[0] == "build" for frame in stack) for stack in stacks) > 20


def test_children_of_the_program_do_not_wait_for_a_session(tmp_path: Path) -> None:
    # each child inherits the preload library; none is targeted by the session
    start = time.monotonic()
    result = _heap_profile(
        "--native",
        "--",
        "/bin/sh",
        "-c",
        "/bin/true; /bin/true; echo done",
        cwd=tmp_path,
        env=_private_env(tmp_path),
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "done\n"
    assert time.monotonic() - start < 15  # a child waiting for a session would take 20 s


def test_native_without_the_unwinder_is_one_line(tmp_path: Path) -> None:
    env = _private_env(tmp_path)
    env["PYTHONPATH"] = str(tmp_path)
    # a heapprofd._dwunwind that cannot be imported, as in a build without libdw
    (tmp_path / "sitecustomize.py").write_text(
        "import sys\nsys.modules['heapprofd._dwunwind'] = None\n"
    )
    result = _heap_profile("--native", "--", "/bin/true", cwd=tmp_path, env=env)
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("heap_profile: --native: ")
    assert "libdw" in result.stderr


def test_the_preload_library_leaves_an_unprofiled_program_alone(tmp_path: Path) -> None:
    from heapprofd._preload import library_path

    env = dict(os.environ)
    env["LD_PRELOAD"] = str(library_path())
    env["PERFETTO_HEAPPROFD_SOCK_NAME"] = str(tmp_path / "no-daemon")
    result = subprocess.run(
        [sys.executable, "-m", "json.tool", "--sort-keys"],
        input='{"b": [1, 2], "a": "x"}',
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == '{\n    "a": "x",\n    "b": [\n        1,\n        2\n    ]\n}\n'


MANY_FRAMES_PY = """
import ctypes

libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
kept = []
# 3,000 distinct functions: the client's frame table grows (calloc) while it samples them
for i in range(3000):
    exec(f"def f{i}():\\n    kept.append(bytearray(4096))\\n    kept.append(libc.malloc(4096))")
    globals()[f"f{i}"]()
print("done")
"""


def test_heapprofd_does_not_profile_itself(tmp_path: Path) -> None:
    (tmp_path / "prog.py").write_text(MANY_FRAMES_PY)
    result = _heap_profile(
        "--native", "-o", "self.pftrace", "prog.py", cwd=tmp_path, env=_private_env(tmp_path)
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "done\n"
    dumps = heap_dumps((tmp_path / "self.pftrace").read_bytes())
    assert {d.heap_name for d in dumps} >= {"python", "libc.malloc"}
    package = str(Path(heapprofd.__file__).parent)
    allocators = {"malloc", "calloc", "realloc", "reallocarray", "memalign", "aligned_alloc"}
    sampled = 0
    for dump in dumps:
        for stack, _ in dump.samples:
            sampled += 1
            # the leaf of a native stack is the preload library's allocator: the call itself
            ours = [
                frame
                for i, frame in enumerate(stack)
                if frame[1].startswith(package)
                and not (i == len(stack) - 1 and frame[0] in allocators)
            ]
            assert not ours, (dump.heap_name, stack)
    assert sampled > 100
