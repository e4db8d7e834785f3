"""SharedRingBuffer on real memfds: upstream's layout, framing, wrapping, overflow, corruption."""

from __future__ import annotations

import fcntl
import mmap
import os
import struct
import subprocess
import sys

import pytest
from heapprofd._native import SharedRingBuffer

PAGE = mmap.PAGESIZE


def _meta(buf: SharedRingBuffer) -> mmap.mmap:
    return mmap.mmap(buf.fd, PAGE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)


def test_records_round_trip_with_upstream_metadata_layout() -> None:
    buf = SharedRingBuffer.create(4 * PAGE)
    assert os.fstat(buf.fd).st_size == 5 * PAGE  # metadata page + data
    assert buf.write(b"hello") == 4 * PAGE
    meta = _meta(buf)
    read_pos, write_pos = struct.unpack_from("<QQ", meta, 8)
    assert (read_pos, write_pos) == (0, 16)  # 8-byte header + 5 bytes, aligned to 8
    bytes_written, succeeded = struct.unpack_from("<QQ", meta, 64)
    assert (bytes_written, succeeded) == (5, 1)
    data = mmap.mmap(buf.fd, 4 * PAGE, mmap.MAP_SHARED, mmap.PROT_READ, offset=PAGE)
    assert struct.unpack_from("<I", data, 0)[0] == 5
    assert data[8:13] == b"hello"
    assert buf.read() == b"hello"
    assert buf.read() is None
    assert struct.unpack_from("<Q", meta, 8)[0] == 16
    assert struct.unpack_from("<Q", meta, 96)[0] == 1  # num_reads_succeeded
    meta.close()
    data.close()
    buf.close()


def test_a_record_across_the_end_reads_back_contiguously() -> None:
    buf = SharedRingBuffer.create(PAGE)
    filler = b"f" * (PAGE - 8 - 64)
    assert buf.write(filler) >= 0
    assert buf.read() == filler
    record = bytes(range(200))  # starts 64 bytes before the end and wraps
    assert buf.write(record) >= 0
    assert buf.read() == record


def test_a_full_buffer_refuses_and_counts_overflow() -> None:
    buf = SharedRingBuffer.create(PAGE)
    written = 0
    while buf.write(b"x" * 100) >= 0:
        written += 1
    assert written == PAGE // 112
    assert buf.write(b"y" * 100) == -1
    assert buf.stats()["num_writes_overflow"] == 2
    assert len(buf.read_batch(1000)[0]) == written
    assert buf.write(b"y") >= 0


def test_a_record_larger_than_the_buffer_is_refused() -> None:
    buf = SharedRingBuffer.create(PAGE)
    assert buf.write(b"z" * (PAGE + 1)) == -3


def test_corrupt_positions_are_detected_by_reader_and_writer() -> None:
    buf = SharedRingBuffer.create(PAGE)
    meta = _meta(buf)
    struct.pack_into("<QQ", meta, 8, 16, 8)  # write position behind the read position
    with pytest.raises(ValueError, match="corrupt"):
        buf.read()
    assert buf.write(b"a") == -3
    stats = buf.stats()
    assert stats["num_reads_corrupt"] == 1
    assert stats["num_writes_corrupt"] == 1
    meta.close()


def test_a_header_claiming_more_than_was_written_is_corrupt() -> None:
    buf = SharedRingBuffer.create(PAGE)
    assert buf.write(b"abc") >= 0
    data = mmap.mmap(buf.fd, PAGE, mmap.MAP_SHARED, mmap.PROT_WRITE, offset=PAGE)
    struct.pack_into("<I", data, 0, 5000)
    records, corrupt = buf.read_batch(10)
    assert records == []
    assert corrupt
    data.close()


def test_a_held_spinlock_makes_writes_fail_fast() -> None:
    buf = SharedRingBuffer.create(PAGE)
    meta = _meta(buf)
    meta[0] = 1
    assert buf.write(b"a") == -2
    assert buf.stats()["failed_spinlocks"] == 1
    meta[0] = 0
    assert buf.write(b"a") >= 0
    meta.close()


def test_the_buffer_is_sealed_against_shrinking_growing_and_unsealing() -> None:
    buf = SharedRingBuffer.create(4 * PAGE)
    seals = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL
    assert fcntl.fcntl(buf.fd, fcntl.F_GET_SEALS) & seals == seals
    for size in (0, PAGE, 10 * PAGE):
        with pytest.raises(PermissionError):
            os.ftruncate(buf.fd, size)
    with pytest.raises(PermissionError):
        fcntl.fcntl(buf.fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_WRITE)
    assert buf.write(b"still here") >= 0
    assert buf.read() == b"still here"
    buf.close()


def test_attach_refuses_a_buffer_that_is_not_sealed() -> None:
    fd = os.memfd_create("unsealed", os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, PAGE + 4 * PAGE)
    with pytest.raises(ValueError, match="not sealed"):
        SharedRingBuffer.attach(fd)
    os.close(fd)


def test_attach_rejects_sizes_that_are_not_a_power_of_two() -> None:
    fd = os.memfd_create("bad")
    os.ftruncate(fd, PAGE + 3 * PAGE)
    with pytest.raises(ValueError, match="size"):
        SharedRingBuffer.attach(fd)
    os.close(fd)


def test_another_process_writes_what_this_one_reads() -> None:
    buf = SharedRingBuffer.create(4 * PAGE)
    code = (
        "import os, sys; from heapprofd._native import SharedRingBuffer as B; "
        "b = B.attach(int(sys.argv[1])); "
        "[b.write(bytes([i]) * (i + 1)) for i in range(100)]; b.set_error_state(1)"
    )
    subprocess.run([sys.executable, "-c", code, str(buf.fd)], pass_fds=(buf.fd,), check=True)
    records, corrupt = buf.read_batch(1000)
    assert not corrupt
    assert records == [bytes([i]) * (i + 1) for i in range(100)]
    assert buf.stats()["error_state"] == 1


def test_reader_paused_and_shutting_down_flags() -> None:
    buf = SharedRingBuffer.create(PAGE)
    assert not buf.get_and_reset_reader_paused()
    buf.set_reader_paused()
    assert buf.get_and_reset_reader_paused()
    assert not buf.get_and_reset_reader_paused()
    assert not buf.shutting_down
    buf.set_shutting_down()
    assert buf.shutting_down
