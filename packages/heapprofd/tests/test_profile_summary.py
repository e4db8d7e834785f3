"""The lines heap_profile prints for what a profile's dumps say was lost."""

from __future__ import annotations

from typing import Any

from heapprofd._profile_summary import profile_losses
from perfetto_protos.upstream import upstream_message_class


def _trace(**flags_by_pid: dict[str, bool]) -> bytes:
    trace: Any = upstream_message_class("perfetto.protos.Trace")()
    packet = trace.packet.add()
    for pid, flags in flags_by_pid.items():
        dump = packet.profile_packet.process_dumps.add()
        dump.pid = int(pid.removeprefix("pid"))
        for name, value in flags.items():
            setattr(dump, name, value)
    data: bytes = trace.SerializeToString()
    return data


def test_a_clean_profile_has_no_line() -> None:
    assert profile_losses(_trace(pid7={"from_startup": True})) == []


def test_each_lost_or_cut_process_gets_its_lines_in_pid_order() -> None:
    trace = _trace(
        pid9={"hit_guardrail": True},
        pid4={"buffer_overran": True, "buffer_corrupted": True},
        pid5={"disconnected": True},
    )
    assert profile_losses(trace) == [
        "pid 4: its ring buffer overran and samples were lost"
        " (--block-client loses none; --shmem-size makes it larger)",
        "pid 4: it wrote a corrupt record and was disconnected",
        "pid 9: heapprofd hit a guardrail (its memory bound, or more than 256 heaps in the"
        " process) and the profile is partial",
    ]
