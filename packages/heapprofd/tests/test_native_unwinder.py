"""The daemon's native unwinder caches: a pc is symbolized once while the process's modules
stay the same, with the frames symbolizing it afresh gives, and the caches outlive changes
of the process's other mappings (its heap growing)."""

from __future__ import annotations

import ctypes
import mmap
import os
from collections.abc import Iterator
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
