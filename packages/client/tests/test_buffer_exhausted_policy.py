"""What track events do when the shared memory buffer is full: DROP, or STALL when asked."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from trace_model import TraceModel

APP = str(Path(__file__).with_name("fill_smb_main.py"))
COUNT = 20_000


def fill(mode: str) -> TraceModel:
    done = subprocess.run(
        [sys.executable, APP, mode, str(COUNT)], capture_output=True, timeout=120, check=True
    )
    return TraceModel(done.stdout)


@pytest.mark.parametrize("mode", ["config-stall", "registered-stall"])
def test_stalling_track_events_lose_nothing_in_a_small_buffer(mode: str) -> None:
    trace = fill(mode)
    values = [e.args["i"] for e in trace.events if e.name == "event"]
    assert values == list(range(COUNT))
    assert not trace.lost_sequences


def test_by_default_track_events_drop_and_say_so_when_the_buffer_is_full() -> None:
    trace = fill("drop")
    values = [e.args["i"] for e in trace.events if e.name == "event"]
    assert 0 < len(values) < COUNT
    assert values == sorted(values)
    assert trace.lost_sequences  # previous_packet_dropped marks where events are missing
    # Once the writer resumed, the sequence started its incremental state over: the events
    # after the loss decode with their interned names.
    assert [e.name for e in trace.events].count("after") > 0
