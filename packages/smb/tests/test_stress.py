"""Several producer processes x threads write into their SMBs while a reader process drains."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import time
from collections.abc import Iterator
from typing import Any

import pytest
from perfetto_smb import PageLayout
from perfetto_testing import TIMEOUT
from protozero import _native
from smb_stress import ProducerConfig, producer_main, reader_main

PACKETS = 250


def run(
    configs: list[ProducerConfig], delay: float, pure_side: str = ""
) -> dict[str, dict[str, Any]]:
    """Runs the producers and the reader; `pure_side` ("reader" or "producers") runs pure
    Python while the other side runs the build the package would load without the switch."""
    ctx = multiprocessing.get_context("spawn")
    pipes = [ctx.Pipe() for _ in configs]
    result_recv, result_send = ctx.Pipe(duplex=False)
    reader = ctx.Process(
        target=reader_main, args=(configs, [p[1] for p in pipes], result_send, delay)
    )
    producers = [
        ctx.Process(target=producer_main, args=(config, pipe[0]))
        for config, pipe in zip(configs, pipes, strict=True)
    ]
    processes = [reader, *producers]
    try:
        for p in processes:
            pure = pure_side == ("reader" if p is reader else "producers")
            with _pure_build(pure if pure_side else None):
                p.start()
        deadline = time.monotonic() + 2 * TIMEOUT
        assert result_recv.poll(2 * TIMEOUT), "the reader did not report in time"
        summary: dict[str, dict[str, Any]] = result_recv.recv()
        for p in processes:
            p.join(max(deadline - time.monotonic(), 1))
            assert p.exitcode == 0, f"{p.name} exited with {p.exitcode}"
        return summary
    finally:
        for p in processes:
            if p.is_alive():
                p.kill()
                p.join()


@contextlib.contextmanager
def _pure_build(pure: bool | None) -> Iterator[None]:
    """Spawned children inherit the environment: set (or clear) PERFETTO_PY_PURE for one."""
    saved = os.environ.get(_native.PURE_ENV)
    if pure is True:
        os.environ[_native.PURE_ENV] = "1"
    elif pure is False:
        os.environ.pop(_native.PURE_ENV, None)
    try:
        yield
    finally:
        os.environ.pop(_native.PURE_ENV, None)
        if saved is not None:
            os.environ[_native.PURE_ENV] = saved


def check_intact(stream: dict[str, Any]) -> None:
    assert stream["errors"] == []
    assert stream["corrupt"] == 0
    assert stream["wrong_stream"] == 0
    assert stream["held_chunks"] == 0  # every chunk needing patches got them
    assert stream["rejected"] == {}


@pytest.mark.timeout(2 * TIMEOUT + 30)
def test_every_packet_arrives_exactly_once_in_order() -> None:
    configs = [
        ProducerConfig(0, 4 * 4096, 4096, PageLayout.DIV1, threads=3, packets=PACKETS, drop=False),
        ProducerConfig(1, 4 * 8192, 8192, PageLayout.DIV4, threads=3, packets=PACKETS, drop=False),
        ProducerConfig(2, 4 * 4096, 4096, PageLayout.DIV14, threads=2, packets=PACKETS, drop=False),
    ]
    summary = run(configs, delay=0)
    assert len(summary) == 8
    for stream in summary.values():
        check_intact(stream)
        assert stream["seqs"] == list(range(PACKETS))
        assert not any(stream["dropped_before"])
        assert stream["drop_count"] == 0
        assert stream["aborted"] == 0
    assert all(stream["producer_patches"] > 0 for stream in summary.values())


@pytest.mark.timeout(2 * TIMEOUT + 30)
def test_too_small_buffer_with_drop_marks_every_loss() -> None:
    configs = [
        ProducerConfig(0, 2 * 4096, 4096, PageLayout.DIV4, 3, PACKETS, drop=True, pause=0.002),
        ProducerConfig(1, 2 * 4096, 4096, PageLayout.DIV1, 2, PACKETS, drop=True, pause=0.002),
    ]
    summary = run(configs, delay=0.003)
    total_drops = marked_losses = 0
    for stream in summary.values():
        check_intact(stream)
        seqs = stream["seqs"]
        assert seqs == sorted(set(seqs))  # in order, never twice
        marked = stream["dropped_before"]
        expected_next = 0
        for seq, dropped in zip(seqs, marked, strict=True):
            assert dropped == (seq != expected_next), f"loss before {seq} not marked"
            expected_next = seq + 1
        if expected_next != PACKETS or any(marked):
            assert stream["drop_count"] > 0  # trailing losses are counted by the writer
        total_drops += stream["drop_count"]
        marked_losses += sum(marked)
    assert total_drops > 0, "the buffer was never exhausted: the test proves nothing"
    assert marked_losses > 0, "no packet after a loss arrived: marking was not exercised"


@pytest.mark.timeout(2 * TIMEOUT + 30)
@pytest.mark.parametrize("pure_side", ["reader", "producers"])
def test_compiled_and_pure_processes_share_one_smb(pure_side: str) -> None:
    configs = [
        ProducerConfig(0, 4 * 4096, 4096, PageLayout.DIV4, threads=2, packets=PACKETS, drop=False),
        ProducerConfig(1, 4 * 8192, 8192, PageLayout.DIV1, threads=2, packets=PACKETS, drop=False),
    ]
    summary = run(configs, delay=0, pure_side=pure_side)
    assert len(summary) == 4
    for stream in summary.values():
        check_intact(stream)
        assert stream["seqs"] == list(range(PACKETS))
        assert stream["drop_count"] == 0
