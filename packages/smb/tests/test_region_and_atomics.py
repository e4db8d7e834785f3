"""Shared memory regions and the cross-process atomic compare-and-swap."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from perfetto_smb import (
    AtomicWords,
    SharedMemory,
    SharedMemoryABI,
    SmbError,
    ensure_valid_shm_sizes,
)
from perfetto_smb._region import is_valid_page_size

INCREMENTS = 3000

PY_INCREMENTER = """
import sys
from perfetto_smb import AtomicWords, SharedMemory
shm = SharedMemory.attach(int(sys.argv[1]))
words = AtomicWords(shm.buffer)
ready = words.load(8)
while words.compare_exchange(8, ready, ready + 1) != ready:
    ready = words.load(8)
while words.load(4) != 1:
    pass
for _ in range(int(sys.argv[2])):
    old = words.load(0)
    while True:
        found = words.compare_exchange(0, old, old + 1)
        if found == old:
            break
        old = found
words.close()
shm.close()
"""

C_INCREMENTER = r"""
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
int main(int argc, char** argv) {
  int fd = atoi(argv[1]);
  long n = atol(argv[2]);
  uint32_t* word = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (word == MAP_FAILED) return 2;
  __atomic_fetch_add(&word[2], 1, __ATOMIC_ACQ_REL);
  while (__atomic_load_n(&word[1], __ATOMIC_ACQUIRE) != 1) {
  }
  for (long i = 0; i < n; i++) {
    uint32_t old = __atomic_load_n(word, __ATOMIC_ACQUIRE);
    while (!__atomic_compare_exchange_n(word, &old, old + 1, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE)) {
    }
  }
  return 0;
}
"""


def test_create_makes_a_sealed_named_memfd() -> None:
    with SharedMemory.create(64 * 1024) as shm:
        assert shm.size == 64 * 1024
        assert shm.sealed
        assert os.readlink(f"/proc/self/fd/{shm.fd}") == "/memfd:perfetto_shmem (deleted)"
        seals = fcntl.fcntl(shm.fd, fcntl.F_GET_SEALS)
        assert seals & fcntl.F_SEAL_SHRINK
        assert seals & fcntl.F_SEAL_GROW
        assert seals & fcntl.F_SEAL_SEAL
        with pytest.raises(PermissionError):
            os.ftruncate(shm.fd, 4096)
        assert shm.buffer[:] == bytes(64 * 1024)
    assert shm.closed
    assert shm.fd == -1


def test_tempfile_fallback_when_memfd_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(os, "memfd_create")
    with SharedMemory.create(8192) as shm:
        assert not shm.sealed
        target = os.readlink(f"/proc/self/fd/{shm.fd}")
        assert "perfetto-shmem-" in target
        assert target.endswith("(deleted)")
        shm.buffer[0:3] = b"abc"
        assert os.pread(shm.fd, 3, 0) == b"abc"


def test_attach_sees_the_other_process_writes() -> None:
    with SharedMemory.create(4096) as shm:
        code = (
            "import sys\nfrom perfetto_smb import SharedMemory\n"
            "shm = SharedMemory.attach(int(sys.argv[1]))\n"
            "assert shm.sealed and shm.size == 4096\n"
            "shm.buffer[100:105] = b'hello'\nshm.close()\n"
        )
        subprocess.run(
            [sys.executable, "-c", code, str(shm.fd)],
            pass_fds=[shm.fd],
            check=True,
            timeout=60,
        )
        assert shm.buffer[100:105] == b"hello"


def test_attach_validates_the_size() -> None:
    with SharedMemory.create(4096) as shm:
        fd = os.dup(shm.fd)
        with pytest.raises(SmbError, match="cannot attach 8192 bytes"):
            SharedMemory.attach(fd, 8192)
        # attach() closed the descriptor it was given.
        with pytest.raises(OSError, match="Bad file descriptor"):
            os.fstat(fd)
    with pytest.raises(SmbError, match="cannot attach"):
        SharedMemory.attach(987654)
    with pytest.raises(SmbError, match="positive"):
        SharedMemory.create(0)


def test_close_refuses_while_an_abi_maps_the_region() -> None:
    shm = SharedMemory.create(8192)
    abi = SharedMemoryABI(shm.buffer, 4096)
    with pytest.raises(SmbError, match="still in use"):
        shm.close()
    abi.close()
    shm.close()
    shm.close()  # idempotent


@pytest.mark.parametrize(
    ("requested", "expected"),
    [
        ((0, 0), (256 * 1024, 4096)),
        ((1024 * 1024, 16384), (1024 * 1024, 16384)),
        ((64 * 1024 * 1024, 4096), (32 * 1024 * 1024, 4096)),  # clamped to 32 MiB
        ((1024 * 1024, 65536), (1024 * 1024, 32768)),  # clamped to 32 KiB pages
        ((1024 * 1024, 12288), (256 * 1024, 4096)),  # 3 x 4 KiB is not a power of two
        ((1024 * 1024, 5000), (256 * 1024, 4096)),
        ((10000, 4096), (256 * 1024, 4096)),  # not a multiple of the page
        ((4096, 8192), (256 * 1024, 4096)),  # smaller than a page
    ],
)
def test_ensure_valid_shm_sizes(requested: tuple[int, int], expected: tuple[int, int]) -> None:
    assert ensure_valid_shm_sizes(*requested) == expected


def test_abi_page_sizes() -> None:
    assert [p for p in range(0, 70000, 1024) if is_valid_page_size(p)] == [
        4096 * n for n in range(1, 17)
    ]


def test_atomic_words_refuse_bad_offsets() -> None:
    buf = bytearray(64)
    words = AtomicWords(buf)
    for offset in (-4, 2, 61, 64):
        with pytest.raises(SmbError, match="outside the buffer or unaligned"):
            words.load(offset)
    assert words.compare_exchange(60, 0, 7) == 0
    assert words.compare_exchange(60, 0, 9) == 7  # failed: returns what it found
    words.store(0, 0xDEADBEEF)
    assert buf[:4] == bytes.fromhex("efbeadde")
    assert words.load(60) == 7
    words.close()
    with pytest.raises(SmbError, match="closed"):
        words.load(0)


def test_cas_counts_exactly_across_processes(tmp_path: Path) -> None:
    """Python processes (and a C peer when a compiler exists) increment one shared word."""
    with SharedMemory.create(4096) as shm:
        commands = [
            [sys.executable, "-c", PY_INCREMENTER, str(shm.fd), str(INCREMENTS)] for _ in range(2)
        ]
        compiler = shutil.which("cc") or shutil.which("gcc")
        if compiler:
            source = tmp_path / "incr.c"
            source.write_text(C_INCREMENTER)
            binary = tmp_path / "incr"
            subprocess.run([compiler, "-O2", "-o", str(binary), str(source)], check=True)
            commands.append([str(binary), str(shm.fd), str(INCREMENTS * 20)])
        procs = [subprocess.Popen(cmd, pass_fds=[shm.fd]) for cmd in commands]
        words = AtomicWords(shm.buffer)
        try:
            deadline = time.monotonic() + 60
            while words.load(8) != len(procs) and time.monotonic() < deadline:
                time.sleep(0.01)
            words.store(4, 1)  # everyone starts at once
            codes = [p.wait(timeout=120) for p in procs]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
            words.close()
        assert codes == [0] * len(procs)
        expected = 2 * INCREMENTS + (INCREMENTS * 20 if compiler else 0)
        assert int.from_bytes(shm.buffer[0:4], "little") == expected


def test_missing_libatomic_is_one_line_naming_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    import ctypes.util

    from perfetto_smb import _atomics

    def no_library(name: str) -> None:
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(ctypes, "CDLL", no_library)
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: None)
    _atomics._load_backend.cache_clear()
    try:
        with pytest.raises(SmbError) as info:
            _atomics._load_backend()
    finally:
        monkeypatch.undo()
        _atomics._load_backend.cache_clear()
    message = str(info.value)
    assert "\n" not in message
    assert "libatomic1" in message
