"""End to end: traced, the daemon, Python targets and a consumer, in real processes."""

from __future__ import annotations

import os
import signal
import socket
from collections.abc import Iterator

import pytest
from hp_testlib import KEPT_BYTES, Stack, Target, config_for, heap_dumps, iter_processes, record
from perfetto_testing import wait_for


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    running = Stack(str(tmp_path_factory.mktemp("hp")))
    yield running
    running.close()


def test_runtime_target_keeps_and_frees_with_the_right_callstacks(stack: Stack) -> None:
    target = Target(stack.env)
    try:

        def during() -> None:
            assert target.command("wait", "PROFILING") == "PROFILING"
            target.command("keep", "KEPT")
            target.command("free", "FREED")
            target.command("keep", "KEPT")

        trace = record(stack, config_for([target.pid]), during)
    finally:
        target.close()
    dumps = list(iter_processes(heap_dumps(trace), target.pid))
    assert len(dumps) == 1
    dump = dumps[0]
    assert dump.heap_name == "python"
    assert not dump.flags["from_startup"]
    assert not dump.flags["buffer_overran"]
    keep = dump.totals("keep_10mb")
    # two rounds of 10 MB allocated, the first freed: within sampling error (~2% at 1 sigma)
    assert 1.8 * KEPT_BYTES < keep["allocated"] < 2.3 * KEPT_BYTES
    assert 0.85 * KEPT_BYTES < keep["allocated"] - keep["freed"] < 1.2 * KEPT_BYTES
    free = dump.totals("free_everything")
    assert not free.get("allocated")
    stacks = [stack_ for stack_, _ in dump.samples if any(f[0] == "keep_10mb" for f in stack_)]
    frame = next(f for f in stacks[0] if f[0] == "keep_10mb")
    assert frame[1].endswith("target_main.py")
    assert frame[2] > 0
    assert [f[0] for f in stacks[0]].index("main") < [f[0] for f in stacks[0]].index("keep_10mb")


def test_allocations_of_another_thread_are_sampled_with_its_stack(stack: Stack) -> None:
    target = Target(stack.env)

    def during() -> None:
        assert target.command("wait", "PROFILING") == "PROFILING"
        target.command("thread", "KEPT")

    try:
        trace = record(stack, config_for([target.pid]), during)
    finally:
        target.close()
    (dump,) = iter_processes(heap_dumps(trace), target.pid)
    kept = dump.totals("thread_keep_10mb")
    assert 0.85 * KEPT_BYTES < kept["allocated"] - kept.get("freed", 0) < 1.2 * KEPT_BYTES
    # the worker thread's stack: the thread machinery, no frame of the main thread's loop
    stacks = [s for s, _ in dump.samples if any(f[0] == "thread_keep_10mb" for f in s)]
    assert all(not any(f[0] == "main" for f in s) for s in stacks)
    assert any(f[0] == "Thread.run" for f in stacks[0])


def test_a_process_profiled_by_another_session_is_rejected(stack: Stack) -> None:
    target = Target(stack.env)
    second: list[bytes] = []

    def during() -> None:
        assert target.command("wait", "PROFILING") == "PROFILING"
        second.append(record(stack, config_for([target.pid]), lambda: None))
        target.command("keep", "KEPT")

    try:
        first = record(stack, config_for([target.pid]), during)
    finally:
        target.close()
    (rejected,) = iter_processes(heap_dumps(second[0]), target.pid)
    assert rejected.flags["rejected_concurrent"]
    assert not rejected.samples
    (profiled,) = iter_processes(heap_dumps(first), target.pid)
    assert not profiled.flags["rejected_concurrent"]
    assert profiled.totals("keep_10mb")["allocated"] > 0.85 * KEPT_BYTES


def test_heaps_are_chosen_by_name_or_excluded(stack: Stack) -> None:
    target = Target(stack.env)
    only_pool = config_for([target.pid])
    only_pool.data_sources[0].config.heapprofd_config.heaps.append("pool")
    all_but_pool = config_for([target.pid], all_heaps=True)
    all_but_pool.data_sources[0].config.heapprofd_config.exclude_heaps.append("pool")
    traces = []
    try:
        for config in (only_pool, all_but_pool):

            def during() -> None:
                target.command("wait", "PROFILING")
                target.command("pool", "POOLED")
                target.command("keep", "KEPT")

            traces.append(record(stack, config, during))
            wait_for(lambda: target.command("state", "STATE") == "STATE False")
    finally:
        target.close()
    pooled = {d.heap_name: d for d in iter_processes(heap_dumps(traces[0]), target.pid)}
    assert set(pooled) == {"pool"}
    assert pooled["pool"].totals("pool_allocate")["alloc_count"] == 1000
    rest = {d.heap_name: d for d in iter_processes(heap_dumps(traces[1]), target.pid)}
    assert set(rest) == {"python"}
    assert rest["python"].totals("keep_10mb")["allocated"] > 0.85 * KEPT_BYTES


def test_startup_target_is_matched_by_its_script_name(stack: Stack) -> None:
    config = config_for([])
    config.data_sources[0].config.heapprofd_config.process_cmdline.append("target_main.py")
    holder: list[Target] = []

    def during() -> None:
        target = Target(stack.env, startup=True)
        holder.append(target)
        assert target.command("state", "STATE") == "STATE True"
        target.command("churn", "CHURNED")

    try:
        trace = record(stack, config, during)
    finally:
        for target in holder:
            target.close()
    dumps = list(iter_processes(heap_dumps(trace), holder[0].pid))
    assert dumps
    assert dumps[0].flags["from_startup"]
    churn = dumps[0].totals("churn")
    expected = 20 * 1000 * (1000 + 1 + 56)
    assert 0.85 * expected < churn["allocated"] < 1.2 * expected
    # everything churn allocated was freed, and each sampled free matched its allocation
    assert churn["freed"] >= 0.97 * churn["allocated"]


def test_no_startup_leaves_a_starting_program_alone(stack: Stack) -> None:
    config = config_for([])
    heap = config.data_sources[0].config.heapprofd_config
    heap.process_cmdline.append("target_main.py")
    heap.no_startup = True
    holder: list[Target] = []

    def during() -> None:
        target = Target(stack.env, startup=True)
        holder.append(target)
        # the program connected at its start (before READY) and was turned away
        assert target.command("state", "STATE") == "STATE False"
        target.command("churn", "CHURNED")

    try:
        trace = record(stack, config, during)
    finally:
        for target in holder:
            target.close()
    assert not list(iter_processes(heap_dumps(trace), holder[0].pid))


def test_killed_target_is_dumped_as_disconnected(stack: Stack) -> None:
    target = Target(stack.env)

    def during() -> None:
        target.command("wait", "PROFILING")
        target.command("keep", "KEPT")
        target.process.send_signal(signal.SIGKILL)
        target.process.wait()

    try:
        trace = record(stack, config_for([target.pid]), during)
    finally:
        target.close()
    dumps = list(iter_processes(heap_dumps(trace), target.pid))
    assert dumps[0].flags["disconnected"]
    assert dumps[0].totals("keep_10mb")["allocated"] > 0.8 * KEPT_BYTES
    assert stack.daemon.poll() is None


def test_flooding_non_blocking_client_is_marked_buffer_overran(stack: Stack) -> None:
    target = Target(stack.env)

    def during() -> None:
        target.command("connected", "CONNECTED")
        target.command("churn", "CHURNED")
        assert target.command("state", "STATE") == "STATE False"

    try:
        trace = record(stack, config_for([target.pid], interval=1, shmem_size=8192), during)
    finally:
        target.close()
    dumps = list(iter_processes(heap_dumps(trace), target.pid))
    assert dumps[0].flags["buffer_overran"]


def test_blocking_client_loses_nothing(stack: Stack) -> None:
    target = Target(stack.env)
    sent: list[int] = []

    def during() -> None:
        target.command("wait", "PROFILING")
        target.command("churn", "CHURNED")
        sent.append(int(target.command("detach", "DETACHED").split()[1]))

    try:
        trace = record(
            stack,
            config_for([target.pid], interval=64, shmem_size=8192, block_client=True),
            during,
        )
    finally:
        target.close()
    dumps = list(iter_processes(heap_dumps(trace), target.pid))
    assert not dumps[0].flags["buffer_overran"]
    assert dumps[0].heap_samples == sent[0] > 10_000


def test_custom_heap_is_profiled_with_all_heaps(stack: Stack) -> None:
    target = Target(stack.env)

    def during() -> None:
        target.command("wait", "PROFILING")
        target.command("pool", "POOLED")

    try:
        trace = record(stack, config_for([target.pid], all_heaps=True), during)
    finally:
        target.close()
    dumps = {d.heap_name: d for d in iter_processes(heap_dumps(trace), target.pid)}
    assert set(dumps) == {"python", "pool"}
    pool = dumps["pool"].totals("pool_allocate")
    assert pool["allocated"] == 1000 * 4096  # allocations of one interval are always sampled
    assert pool["alloc_count"] == 1000


def test_hostile_client_cannot_hurt_the_daemon_or_another_client(stack: Stack) -> None:
    good = Target(stack.env)
    hostile = Target(stack.env, "--hostile")

    def during() -> None:
        good.command("wait", "PROFILING")
        hostile.command("wait", "PROFILING")
        hostile.command("garbage", "GARBAGE")
        good.command("keep", "KEPT")

    try:
        trace = record(stack, config_for([good.pid, hostile.pid]), during)
    finally:
        good.close()
        hostile.close()
    assert stack.daemon.poll() is None
    dumps = heap_dumps(trace)
    bad = list(iter_processes(dumps, hostile.pid))
    assert bad
    assert bad[0].flags["buffer_corrupted"]
    fine = list(iter_processes(dumps, good.pid))
    assert not fine[0].flags["buffer_corrupted"]
    keep = fine[0].totals("keep_10mb")
    assert 0.85 * KEPT_BYTES < keep["allocated"] < 1.2 * KEPT_BYTES
    assert os.path.exists(stack.heapprofd_socket)


def test_continuous_dumps_and_the_memory_guardrail(stack: Stack) -> None:
    target = Target(stack.env)

    def during() -> None:
        target.command("wait", "PROFILING")
        target.command("keep", "KEPT")
        wait_for(lambda: "guardrail" in stack.daemon_log)

    config = config_for([target.pid], continuous_dump_ms=100)
    config.data_sources[0].config.heapprofd_config.max_heapprofd_memory_kb = 1
    try:
        trace = record(stack, config, during)
    finally:
        target.close()
    dumps = list(iter_processes(heap_dumps(trace), target.pid))
    assert len(dumps) >= 2
    assert dumps[-1].flags["hit_guardrail"]
    assert stack.daemon.poll() is None


def test_bad_handshakes_are_dropped_and_the_daemon_keeps_serving(stack: Stack) -> None:
    silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    silent.connect(stack.heapprofd_socket)
    noisy = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    noisy.connect(stack.heapprofd_socket)
    noisy.sendall(b"no descriptors here" * 100)
    target = Target(stack.env)

    def during() -> None:
        assert target.command("wait", "PROFILING") == "PROFILING"
        target.command("keep", "KEPT")

    try:
        trace = record(stack, config_for([target.pid]), during)
    finally:
        target.close()
        silent.close()
        noisy.close()
    dumps = list(iter_processes(heap_dumps(trace), target.pid))
    assert dumps[0].totals("keep_10mb")["allocated"] > 0.8 * KEPT_BYTES
    assert stack.daemon.poll() is None
