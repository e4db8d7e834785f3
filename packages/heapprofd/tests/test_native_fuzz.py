"""Native Malloc records (registers, raw stack, Python frame ids) as a hostile client writes
them: the unwinder thread's drain parses or rejects each one and never fails."""

from __future__ import annotations

import os
import socket
import struct
from typing import Any

import pytest
from heapprofd._native import SharedRingBuffer
from heapprofd._preload import native_unavailable
from heapprofd._unwinder import ARCH_X86_64, ClientEnd, RecordBatch, Unwinder
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.skipif(
    not os.environ.get("CI") and native_unavailable() is not None,
    reason=f"native profiling unavailable here: {native_unavailable()}",
)

_HEAD = struct.Struct("<QQQQQQQ")  # type, seq, size, sample size, address, sp, timestamp
_TAIL = struct.Struct("<II")  # heap id, arch


@st.composite
def native_records(draw: Any) -> bytes:
    """A Malloc record with arch x86-64 (or another), whose parts may lie about each other."""
    stack = draw(st.binary(max_size=2048))
    real_sp = draw(st.integers(0, 2**64 - 1))
    registers = draw(st.lists(st.integers(0, 2**64 - 1), min_size=17, max_size=17))
    stack_len = draw(st.one_of(st.just(len(stack)), st.integers(0, 2**64 - 1)))
    python_count = draw(st.one_of(st.just(0), st.integers(0, 2**64 - 1)))
    python_ids = draw(st.lists(st.integers(0, 2**64 - 1), max_size=8))
    register_data = struct.pack("<19Q", *registers, stack_len, python_count).ljust(272, b"\0")
    head = _HEAD.pack(1, 1, 4096, 4096, draw(st.integers(0, 2**64 - 1)), real_sp, 0)
    arch = draw(st.sampled_from([ARCH_X86_64, ARCH_X86_64, 1, 2**32 - 1]))
    tail = _TAIL.pack(draw(st.integers(0, 2**32 - 1)), arch)
    payload = stack + struct.pack(f"<{len(python_ids)}Q", *python_ids)
    record: bytes = draw(
        st.one_of(
            st.just(head + register_data + tail + payload), st.binary(min_size=1, max_size=400)
        )
    )
    return record


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=st.lists(native_records(), min_size=1, max_size=12))
def test_native_records_cannot_hurt_the_daemon(records: list[bytes]) -> None:
    ring = SharedRingBuffer.create(1 << 20)
    ours, theirs = socket.socketpair()
    proc_fds = (os.open("/proc/self/maps", os.O_RDONLY), os.open("/proc/self/mem", os.O_RDONLY))
    batches: list[RecordBatch] = []
    ends: list[ClientEnd] = []
    unwinder = Unwinder(
        os.getpid(),
        ours,
        ring=ring,
        proc_fds=proc_fds,
        post_batch=batches.append,
        post_end=ends.append,
        native=True,
    )
    try:
        for record in records:
            assert ring.write(record) >= 0
        unwinder._drain_all()  # the unwinder thread's drain, run here
        described = {cs for batch in batches for cs, _stack in batch.callstacks}
        events = [event for batch in batches for event in batch.events]
        assert len(events) <= len(records)
        for event in events:
            if len(event) == 4:  # a Malloc: its callstack was described
                assert event[3] in described
        errors = sum(batch.unwinding_errors for batch in batches)
        assert errors <= 2 * len(records)
    finally:
        theirs.close()
        unwinder._end(by_daemon=True)  # closes the socket, the /proc descriptors and the ring
    assert len(ends) == 1
