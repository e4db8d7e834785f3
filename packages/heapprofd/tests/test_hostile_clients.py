"""End to end: clients that attack the daemon through their ring buffer, one of another uid,
next to a root program profiled in the same session."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from heapprofd._bookkeeping import MAX_HEAPS_PER_PROCESS
from hp_testlib import (
    HERE,
    KEPT_BYTES,
    Stack,
    Target,
    config_for,
    heap_dumps,
    iter_processes,
    record,
)
from perfetto_protos.upstream import parse_upstream_trace
from perfetto_testing import wait_for

HOSTILE = str(HERE / "hostile_client.py")
OTHER_UID = 2001


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    # a directory every user can reach: the daemon's socket is 0666, as upstream's
    directory = tempfile.mkdtemp(prefix="hp-hostile-")
    os.chmod(directory, 0o755)
    running = Stack(directory)
    yield running
    running.close()
    shutil.rmtree(directory, ignore_errors=True)


class _Lines:
    """A process's stdout lines, read on a thread."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.strip())

    def wait(self, prefix: str) -> str:
        wait_for(lambda: any(line.startswith(prefix) for line in self.lines))
        return next(line for line in self.lines if line.startswith(prefix))

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self._thread.join()
        if self.process.stdout is not None:
            self.process.stdout.close()


def _profile_packets(trace: bytes, pid: int) -> int:
    parsed: Any = parse_upstream_trace(trace)
    return sum(
        1
        for packet in parsed.packet
        if packet.HasField("profile_packet")
        and any(dump.pid == pid for dump in packet.profile_packet.process_dumps)
    )


def test_a_client_of_another_uid_cannot_shrink_its_buffer_or_hurt_a_root_program(
    stack: Stack,
) -> None:
    victim = Target(stack.env)
    attacker: _Lines | None = None
    config = config_for([victim.pid])
    config.data_sources[0].config.heapprofd_config.process_cmdline.append("hostile_client.py")

    def during() -> None:
        nonlocal attacker
        assert victim.command("wait", "PROFILING") == "PROFILING"
        attacker = _Lines(
            subprocess.Popen(
                [sys.executable, HOSTILE, str(OTHER_UID)],
                env=stack.env,
                stdout=subprocess.PIPE,
                text=True,
            )
        )
        attacker.wait("ATTACKED")
        attacker.wait("DROPPED")
        victim.command("keep", "KEPT")

    try:
        trace = record(stack, config, during)
    finally:
        victim.close()
        if attacker is not None:
            attacker.close()
    assert attacker is not None
    seals = int(attacker.wait("SEALS").split()[1])
    assert seals & 0x7 == 0x7  # F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW
    assert attacker.wait("FTRUNCATE") == "FTRUNCATE EPERM"
    assert stack.daemon.poll() is None
    attacker_pid = attacker.process.pid
    assert f"pid {attacker_pid}: bad record" in stack.daemon_log
    dumps = heap_dumps(trace)
    bad = list(iter_processes(dumps, attacker_pid))
    assert bad
    assert all(dump.flags["buffer_corrupted"] for dump in bad)
    fine = list(iter_processes(dumps, victim.pid))
    assert len(fine) == 1
    assert not fine[0].flags["buffer_corrupted"]
    assert not fine[0].flags["buffer_overran"]
    keep = fine[0].totals("keep_10mb")
    assert 0.85 * KEPT_BYTES < keep["allocated"] < 1.2 * KEPT_BYTES
    assert _profile_packets(trace, victim.pid) >= 1


def _rss_kb(pid: int) -> int:
    """The process's private memory in use: not the ring buffers it maps, which fill and count
    towards VmRSS when a blocking client waits for room."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1])
    raise AssertionError("no RssAnon")


def test_a_heap_name_flood_is_bounded_and_counted(stack: Stack) -> None:
    flood = 100_000
    target = Target(stack.env)
    rss_before = 0

    def during() -> None:
        nonlocal rss_before
        assert target.command("wait", "PROFILING") == "PROFILING"
        rss_before = _rss_kb(stack.daemon.pid)
        assert target.command(f"heapflood {flood}", "FLOODED") == f"FLOODED {flood}"
        target.command("keep", "KEPT")

    try:
        # the client waits for room rather than drop samples: the flood fills the ring
        config = config_for([target.pid], all_heaps=True, block_client=True)
        trace = record(stack, config, during)
    finally:
        target.close()
    assert stack.daemon.poll() is None
    dumps = list(iter_processes(heap_dumps(trace), target.pid))
    assert len(dumps) <= MAX_HEAPS_PER_PROCESS
    python = next(dump for dump in dumps if dump.heap_name == "python")
    assert not python.flags["buffer_overran"]
    assert python.totals("keep_10mb")["allocated"] > 0.85 * KEPT_BYTES
    parsed: Any = parse_upstream_trace(trace)
    flags = {
        dump.hit_guardrail
        for packet in parsed.packet
        for dump in packet.profile_packet.process_dumps
        if dump.pid == target.pid
    }
    assert flags == {True}  # every dump of the process says that its profile is partial
    assert f"pid {target.pid}: more than {MAX_HEAPS_PER_PROCESS} heaps" in stack.daemon_log
    # two heaps (python and pool) are the target's own; every flooded heap past the bound
    refused = flood - (MAX_HEAPS_PER_PROCESS - 2)
    wait_for(lambda: f"pid {target.pid}: {refused} records of heaps past" in stack.daemon_log)
    # 100,000 heaps held in the daemon took 56 MB before the bound; bounded, the flood and the
    # dump add 2-10 MB (10 MB in an installed run under xdist)
    assert _rss_kb(stack.daemon.pid) - rss_before < 20_000
