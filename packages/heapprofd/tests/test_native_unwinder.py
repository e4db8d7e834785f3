"""The daemon's native unwinder caches: a pc is symbolized once while the process's modules
stay the same, with the frames symbolizing it afresh gives, and the caches outlive changes
of the process's other mappings (its heap growing). The per-module symbol table names every
pc as libdw's scan of the module's symbols does."""

from __future__ import annotations

import ctypes
import mmap
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from heapprofd._unwinder import Unwinder, module_maps
from test_native_heap import pytestmark  # noqa: F401 (skipped where it is)

MAPS = b"""\
55d0c0a00000-55d0c0a01000 r--p 00000000 08:01 1234 /usr/bin/python3.11
55d0c0a01000-55d0c0c00000 r-xp 00001000 08:01 1234 /usr/bin/python3.11
55d0c1000000-55d0c1200000 rw-p 00000000 00:00 0 [heap]
7f0000000000-7f0000100000 rw-p 00000000 00:00 0
7f0000100000-7f0000101000 r-xp 00000000 00:00 0
7f0000200000-7f0000300000 r-xp 00000000 08:01 99 /usr/lib/libc.so.6
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]
7ffd00100000-7ffd00102000 r-xp 00000000 00:00 0 [vdso]
"""


def test_module_maps_keeps_the_lines_that_can_hold_code() -> None:
    kept = module_maps(MAPS).splitlines()
    assert [line.split()[-1] for line in kept] == [
        b"/usr/bin/python3.11",
        b"/usr/bin/python3.11",
        b"0",  # anonymous executable memory (a JIT's, a trampoline's)
        b"/usr/lib/libc.so.6",
        b"[vdso]",
    ]


class Target:
    """A forked child of this process (same addresses), which maps 64 MiB of anonymous
    memory when asked (its heap grows, as malloc grows it)."""

    def __init__(self) -> None:
        self._ask_r, self._ask_w = os.pipe()
        self._done_r, self._done_w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:  # the child: grows once when asked, ends at end of file
            try:
                os.close(self._ask_w)
                os.close(self._done_r)
                while os.read(self._ask_r, 1):
                    grown = mmap.mmap(-1, 64 << 20, flags=mmap.MAP_PRIVATE)
                    grown[::4096] = b"x" * (len(grown) // 4096)
                    os.write(self._done_w, b"1")
            finally:
                os._exit(0)
        os.close(self._ask_r)
        os.close(self._done_w)

    def grow(self) -> None:
        os.write(self._ask_w, b"1")
        assert os.read(self._done_r, 1) == b"1"

    def end(self) -> None:
        os.close(self._ask_w)
        os.close(self._done_r)
        os.waitpid(self.pid, 0)

    def unwinder(self) -> Any:
        """The daemon's unwinder of this process (its unwinding only: no connection)."""
        fds = (
            os.open(f"/proc/{self.pid}/maps", os.O_RDONLY),
            os.open(f"/proc/{self.pid}/mem", os.O_RDONLY),
        )
        unwinder = Unwinder(
            self.pid,
            None,  # type: ignore[arg-type]
            ring=None,  # type: ignore[arg-type]
            proc_fds=fds,
            post_batch=lambda batch: None,
            post_end=lambda end: None,
        )
        assert unwinder._native_unwinder() is not None
        return unwinder


@pytest.fixture
def target() -> Iterator[Target]:
    child = Target()
    try:
        yield child
    finally:
        child.end()


@pytest.fixture
def pcs() -> list[int]:
    """pcs in functions of this process (and of its fork): libc's, the interpreter's."""
    libc = ctypes.CDLL(None)
    functions = [libc.malloc, libc.free, ctypes.pythonapi.PyList_New, ctypes.pythonapi.Py_Exit]
    return [ctypes.cast(f, ctypes.c_void_p).value or 0 for f in functions] + [
        (ctypes.cast(f, ctypes.c_void_p).value or 0) + 4 for f in functions
    ]


def test_a_pc_is_symbolized_once_with_the_frames_of_a_fresh_unwinder(
    target: Target, pcs: list[int]
) -> None:
    cached, fresh = target.unwinder(), target.unwinder()
    first = [cached._native_frame(pc) for pc in pcs]
    assert [cached._native_frame(pc) for pc in pcs] == first
    assert [fresh._symbolize(pc) for pc in pcs] == first
    assert {frame[0] for frame in first} >= {"PyList_New", "Py_Exit"}  # (malloc's has aliases)
    assert set(cached._pc_frames) == set(pcs)


def test_the_caches_outlive_a_change_of_anonymous_mappings(target: Target, pcs: list[int]) -> None:
    unwinder = target.unwinder()
    first = [unwinder._native_frame(pc) for pc in pcs]
    before = unwinder._native.maps()
    target.grow()
    assert unwinder._native.maps() != before
    assert unwinder._reload_maps() is False  # the modules did not change
    assert set(unwinder._pc_frames) == set(pcs)
    assert [unwinder._native_frame(pc) for pc in pcs] == first


def _module_of(address: int) -> tuple[str, int, int]:
    """(path, start, end) of the file mapped at `address` in this process (and its fork)."""
    maps = []  # (start, end, path)
    for line in Path("/proc/self/maps").read_text().splitlines():
        parts = line.split()
        if len(parts) > 5:
            low, _, high = parts[0].partition("-")
            maps.append((int(low, 16), int(high, 16), parts[5]))
    path = next(p for low, high, p in maps if low <= address < high)
    ranges = [(low, high) for low, high, p in maps if p == path]
    return path, min(r[0] for r in ranges), max(r[1] for r in ranges)


def _candidate_pcs(function: Any, name: str) -> tuple[list[int], int]:
    """pcs around the symbols of the module holding `function` (called `name`): for an even
    sample of its symbols, the first and last ones and every sizeless one, each one's start
    and end, their neighbours and its middle; the module's bounds. With the number of
    symbols chosen."""
    address = ctypes.cast(function, ctypes.c_void_p).value or 0
    path, start, end = _module_of(address)
    symbols: dict[int, int] = {}
    bias = None
    for option in ("--dynamic", "--extern-only"):
        out = subprocess.run(
            ["nm", option, "--defined-only", "-S", path], check=True, capture_output=True, text=True
        ).stdout
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 4:
                symbols.setdefault(int(parts[0], 16), int(parts[1], 16))
                if parts[3].partition("@")[0] == name:
                    bias = address - int(parts[0], 16)
            elif len(parts) == 3 and parts[1] in "TtWw":
                symbols.setdefault(int(parts[0], 16), 0)
    assert bias is not None, (name, path)
    ordered = sorted(symbols)
    step = max(1, len(ordered) // 400)
    chosen = set(ordered[::step]) | {ordered[0], ordered[-1]}
    chosen |= {value for value in ordered if not symbols[value]}
    pcs = set()
    for value in chosen:
        size = symbols[value]
        pcs |= {value - 1, value, value + 1, value + size // 2, value + size - 1, value + size}
        pcs.add(value + size + 1)
    found = {pc + bias for pc in pcs} | {start - 1, start, end - 1, end}
    return sorted(found), len(chosen)


def test_the_symbol_table_names_each_pc_as_libdw_does(target: Target) -> None:
    libc = ctypes.CDLL(None)
    pcs: list[int] = []
    for function, name in ((libc.malloc, "malloc"), (ctypes.pythonapi.PyList_New, "PyList_New")):
        found, chosen = _candidate_pcs(function, name)
        assert chosen > 100
        pcs += found
    ascending, descending = target.unwinder()._native, target.unwinder()._native
    expected = [ascending.addrname(pc) for pc in pcs]
    first = {pc: ascending.symbolize(pc) for pc in pcs}  # each interval first asked low
    last = {pc: descending.symbolize(pc) for pc in reversed(pcs)}  # or high
    for pc, name in zip(pcs, expected, strict=True):
        if first[pc] is None:  # outside every module
            assert last[pc] is None, hex(pc)
            assert name is None, hex(pc)
            continue
        assert first[pc][0] == last[pc][0] == (name or ""), hex(pc)
    assert None in expected  # pcs that no symbol covers (between symbols, past the module)
    assert len({name for name in expected if name}) > 200
