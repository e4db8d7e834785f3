"""The recorder's two packet batches (compiled build's C buffer, pure build's bytearray) agree.

Both are driven with the same operations, as a `ThreadRecorder` uses them (start a batch with
a prologue, write TrackEvents with or without interned data, take the bytes, drop them), and
their bytes, sizes and clocks are compared after each; the bytes are read back with upstream's
schema. Compiled only: `_packet_batch` does not run as Python.
"""

from __future__ import annotations

import importlib
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import (
    EventName,
    InternedData,
    Trace,
    TrackEvent,
)
from perfetto_client._tracer import _packet_batch_pure
from perfetto_client._tracer._packets import sequence_field
from tracer_support import HOOKS

SEQ = sequence_field(1 << 14)
_SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _interned(iid: int, name: str) -> bytes:
    return bytes(InternedData(event_names=[EventName(iid=iid, name=name)]).SerializeToString())


_timestamps = st.integers(0, (1 << 63) - 1)
_starts = st.tuples(st.just("start"), st.binary(max_size=40), _timestamps)
_writes = st.tuples(
    st.just("write"),
    st.sampled_from([1, 2, 3]),  # SLICE_BEGIN, SLICE_END, INSTANT
    st.one_of(st.just(0), st.integers(1, 200), st.integers(1, 0xFFFFFFFE)),
    st.one_of(_timestamps, st.integers(0, 1 << 20)),
    st.booleans(),
    st.one_of(
        st.just(b""),
        st.builds(_interned, st.integers(1, 1 << 32), st.text(max_size=300)),
        st.just(_interned(7, "x" * 70000)),  # more than the room a batch keeps
    ),
)
_operations = st.lists(
    st.one_of(_writes, _writes, _writes, st.just(("data",)), st.just(("clear",)), _starts),
    max_size=25,
)


def _compiled_batch() -> Any:
    if "compiled" not in HOOKS:
        pytest.skip("PERFETTO_PY_PURE=1: one build only")
    return importlib.import_module("perfetto_client._tracer._packet_batch").PacketBatch


def _meaning(data: bytes, prologue: bytes) -> list[tuple[int, int, int, bool, bytes]]:
    """Each packet after `prologue`: (type, name iid, timestamp delta, location, interned)."""
    trace = Trace.FromString(data[len(prologue) :])
    events = []
    for packet in trace.packet:
        assert packet.trusted_packet_sequence_id == 1 << 14
        event = packet.track_event
        events.append(
            (
                event.type,
                event.name_iid,
                packet.timestamp,
                event.HasField("source_location_iid"),
                packet.interned_data.SerializeToString(),
            )
        )
    return events


@_SETTINGS
@given(prologue=st.binary(max_size=40), ts=_timestamps, operations=_operations)
def test_both_batches_write_the_same_bytes(
    prologue: bytes, ts: int, operations: list[tuple[Any, ...]]
) -> None:
    compiled = _compiled_batch()(SEQ, 256)
    pure = _packet_batch_pure.PacketBatch(SEQ, 256)
    expected: list[tuple[int, int, int, bool, bytes]] = []
    for batch in (compiled, pure):
        batch.start(prologue, ts)
    last_ts = ts
    for operation in operations:
        name, *args = operation
        if name == "write":
            kind, iid, when, location, blob = args
            for batch in (compiled, pure):
                assert batch.write(kind, iid, when, location, blob) == 0
            expected.append(
                (
                    kind,
                    iid,
                    (when - last_ts) % (1 << 64),
                    bool(location and iid and kind == TrackEvent.TYPE_SLICE_BEGIN),
                    blob,
                )
            )
            last_ts = when
        elif name == "start":
            prologue, last_ts = args
            expected.clear()
            for batch in (compiled, pure):
                batch.start(prologue, last_ts)
        elif name == "clear":
            prologue = b""
            expected.clear()
            for batch in (compiled, pure):
                batch.clear()
        assert compiled.data() == pure.data()
        assert compiled.pos == pure.pos == len(pure.data())
        assert compiled.last_ts == pure.last_ts == last_ts
    assert _meaning(pure.data(), prologue) == expected
