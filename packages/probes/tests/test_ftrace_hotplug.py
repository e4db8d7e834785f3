"""linux.ftrace while a CPU goes offline and comes back: the session records on, and what could
not be read is counted. These tests take a real CPU offline, which would disturb tests running
beside them: they run alone (`nox -s exclusive_tests`, a phase of `dev.py test` of its own)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from ftrace_testlib import SCHED_EVENTS, ftrace_config, read_packet, switches, tracefs_or_skip
from perfetto_probes.ftrace import FtraceDataSource
from perfetto_protos.trace.ftrace.ftrace_event_bundle_pb2 import FtraceParseStatus
from perfetto_protos.trace.ftrace.ftrace_stats_pb2 import FtraceStats

pytestmark = pytest.mark.exclusive

EXCLUSIVE_ENV = "PERFETTO_PY_EXCLUSIVE_TESTS"
"""Set (to 1) by `nox -s exclusive_tests`, which runs these tests while nothing else runs."""


def _hotpluggable_cpu() -> Path:
    """The `online` file of the last CPU, or a skip saying why it cannot be used."""
    if os.environ.get(EXCLUSIVE_ENV) != "1":
        pytest.skip(f"takes a CPU offline: runs alone, with {EXCLUSIVE_ENV}=1")
    tracefs_or_skip()
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("one CPU: none can go offline")
    online = Path(f"/sys/devices/system/cpu/cpu{cpus[-1]}/online")
    if not os.access(online, os.W_OK):
        pytest.skip(f"{online}: not writable here")
    return online


@contextmanager
def _offline(online: Path) -> Iterator[None]:
    """The CPU offline inside the block, online again after it, whatever happens."""
    try:
        online.write_text("0")
    except OSError as exc:  # e.g. a CPU the kernel will not take offline
        pytest.skip(f"{online}: {exc.strerror}")
    try:
        yield
    finally:
        online.write_text("1")


def _busy_switching(seconds: float) -> None:
    """Sleeps in short steps: each sleep is a switch on the CPU this thread runs on."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(0.001)


def _cpu_of(online: Path) -> int:
    return int(online.parent.name.removeprefix("cpu"))


def _record(session: Callable[[FtraceDataSource], None]) -> tuple[list[Any], list[Any]]:
    """Runs `session` (which starts it) on a linux.ftrace data source, stopped after whatever
    happens; the packets, read with upstream's schema, and their FtraceStats."""
    packets: list[bytes] = []
    source = FtraceDataSource(ftrace_config(ftrace_events=SCHED_EVENTS), packets.append)
    try:
        session(source)
    finally:
        source.stop()
    assert source.instance is None  # removed
    read = [read_packet(p) for p in packets]
    return read, [p.ftrace_stats for p in read if p.HasField("ftrace_stats")]


def test_a_cpu_offline_during_the_session_loses_nothing_else_and_is_back_after() -> None:
    online = _hotpluggable_cpu()
    cpu = _cpu_of(online)

    def session(source: FtraceDataSource) -> None:
        source.start()
        _busy_switching(0.2)
        source.flush()
        with _offline(online):
            _busy_switching(0.3)
            source.flush()
        time.sleep(0.2)  # the CPU back, scheduling again
        _busy_switching(0.2)

    read, stats = _record(session)
    assert [s.phase for s in stats] == [FtraceStats.START_OF_TRACE, FtraceStats.END_OF_TRACE]
    seen = list(switches(read))
    assert cpu in {s[0] for s in seen}  # its switches before and after are kept
    assert len({s[0] for s in seen}) >= 2
    for each in {s[0] for s in seen}:
        stamps = [s[1] for s in seen if s[0] == each]
        assert stamps == sorted(stamps), f"cpu{each}: timestamps go back"
    # Every CPU is in the end's stats (the CPU is back), so nothing read is unaccounted for.
    assert {c.cpu for c in stats[-1].cpu_stats} == set(range(os.cpu_count() or 1))


def test_a_session_stopped_while_a_cpu_is_offline_ends_and_counts_what_it_could_not_read() -> None:
    online = _hotpluggable_cpu()
    cpu = _cpu_of(online)

    def session(source: FtraceDataSource) -> None:
        source.start()
        _busy_switching(0.2)
        with _offline(online):
            _busy_switching(0.2)
            source.stop()

    read, stats = _record(session)
    end = stats[-1]
    assert end.phase == FtraceStats.END_OF_TRACE
    listed = {c.cpu for c in end.cpu_stats}
    # The offline CPU's counters are in the end's stats, or their read failed and is counted.
    assert cpu in listed or (
        FtraceParseStatus.FTRACE_STATUS_UNEXPECTED_READ_ERROR in end.ftrace_parse_errors
    )
    assert 0 in listed
    assert 0 in {s[0] for s in switches(read)}


def test_a_cpu_offline_at_the_start_is_read_once_it_is_back() -> None:
    online = _hotpluggable_cpu()
    cpu = _cpu_of(online)

    def session(source: FtraceDataSource) -> None:
        with _offline(online):
            source.start()
        time.sleep(0.2)  # the CPU back, scheduling again
        _busy_switching(0.3)

    read, stats = _record(session)
    assert [s.phase for s in stats] == [FtraceStats.START_OF_TRACE, FtraceStats.END_OF_TRACE]
    assert cpu in {s[0] for s in switches(read)}
    assert cpu in {c.cpu for c in stats[-1].cpu_stats}
