"""What track events do when the shared memory buffer is full: STALL_THEN_DROP, or what a
session or the program asks for."""

from __future__ import annotations

import collections
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


@pytest.mark.parametrize("mode", ["default", "config-stall", "registered-stall"])
def test_stalling_track_events_lose_nothing_in_a_small_buffer(mode: str) -> None:
    trace = fill(mode)
    values = [e.args["i"] for e in trace.events if e.name == "event"]
    assert values == list(range(COUNT))
    assert not trace.lost_sequences


def test_track_events_asked_to_drop_drop_and_say_so_when_the_buffer_is_full() -> None:
    trace = fill("drop")
    values = [e.args["i"] for e in trace.events if e.name == "event"]
    assert 0 < len(values) < COUNT
    assert values == sorted(values)
    assert trace.lost_sequences  # previous_packet_dropped marks where events are missing
    # Once the writer resumed, the sequence started its incremental state over: the events
    # after the loss decode with their interned names.
    assert [e.name for e in trace.events].count("after") > 0
    assert trace.trace_writer_packet_loss >= 1  # the service counted where the loss was


TIGHT_LOOP = """
import sys
import perfetto_client as pc
from perfetto_client import Backend, Tracing

Tracing.initialize(Backend.IN_PROCESS)
LOOP = pc.Category("loop")
session = Tracing.new_trace()
session.setup({"buffers": [{"size_kb": 65536}]})
session.start()
for _ in range(SLICES // 2):
    with pc.trace_event(LOOP, "s"):
        pass
for i in range(COUNTERS):
    pc.counter(LOOP, "c", i)
session.stop()
sys.stdout.buffer.write(session.read_trace(timeout=30))
session.close()
"""


def test_with_defaults_a_tight_loop_keeps_every_event(tmp_path: Path) -> None:
    slices, counters = 280_000, 140_000
    program = tmp_path / "loop.py"
    program.write_text(f"SLICES = {slices}\nCOUNTERS = {counters}\n{TIGHT_LOOP}")
    done = subprocess.run(
        [sys.executable, str(program)], capture_output=True, timeout=300, check=True
    )
    trace = TraceModel(done.stdout)
    kinds = collections.Counter(e.kind for e in trace.events)
    assert kinds["B"] + kinds["E"] == slices
    assert trace.counters("c") == list(range(counters))
    assert trace.trace_writer_packet_loss == 0


FORKED = """
import os
from perfetto_client import Backend, BufferExhaustedPolicy, Tracing, _tracing

DROP = BufferExhaustedPolicy.DROP
Tracing.initialize(Backend.IN_PROCESS, track_event_buffer_exhausted_policy=DROP)
pid = os.fork()
if pid == 0:
    print("child", _tracing._track_event_kind().buffer_exhausted_policy.name, flush=True)
    os._exit(0)
os.waitpid(pid, 0)
print("parent", _tracing._track_event_kind().buffer_exhausted_policy.name)
"""


def test_a_forked_child_keeps_the_programs_track_event_policy(tmp_path: Path) -> None:
    program = tmp_path / "forked.py"
    program.write_text(FORKED)
    done = subprocess.run(
        [sys.executable, str(program)], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.splitlines() == ["child DROP", "parent DROP"]
