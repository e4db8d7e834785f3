"""Builds synthetic trace files shaped like an SDK's: interning, incremental clocks, tracks."""

from __future__ import annotations

from collections.abc import Iterator

from perfetto_protos.trace.trace_packet_pb2 import TracePacket
from perfetto_protos.trace.trace_pb2 import Trace

SLICE_BEGIN, SLICE_END, INSTANT, COUNTER = 1, 2, 3, 4
INCREMENTAL_CLOCK = 64
SEQ_INCREMENTAL_STATE_CLEARED = 1


def _framed(packet: TracePacket) -> bytes:
    trace = Trace()
    trace.packet.append(packet)
    return trace.SerializeToString()


def sdk_like_packets(rounds: int, sequence_id: int = 7, pid: int = 100) -> Iterator[bytes]:
    """Framed packets: per round, "work" (cat "app") 3 ms with a nested "step" (cat "io,app")
    of 1 ms via interned names, an instant "tick", and a counter sample of value round."""
    first = TracePacket(trusted_packet_sequence_id=sequence_id, previous_packet_dropped=1)
    first.sequence_flags = SEQ_INCREMENTAL_STATE_CLEARED
    first.trace_packet_defaults.timestamp_clock_id = INCREMENTAL_CLOCK
    first.trace_packet_defaults.track_event_defaults.track_uuid = 1
    clock = first.clock_snapshot.clocks.add()
    clock.clock_id, clock.timestamp, clock.is_incremental = INCREMENTAL_CLOCK, 1_000_000, True
    yield _framed(first)
    process = TracePacket(trusted_packet_sequence_id=sequence_id)
    process.track_descriptor.uuid = 2
    process.track_descriptor.process.pid = pid
    process.track_descriptor.process.process_name = "demo"
    yield _framed(process)
    thread = TracePacket(trusted_packet_sequence_id=sequence_id)
    thread.track_descriptor.uuid = 1
    thread.track_descriptor.thread.pid = pid
    thread.track_descriptor.thread.tid = pid + 1
    thread.track_descriptor.thread.thread_name = "main"
    yield _framed(thread)
    counter = TracePacket(trusted_packet_sequence_id=sequence_id)
    counter.track_descriptor.uuid = 3
    counter.track_descriptor.name = "queue_depth"
    counter.track_descriptor.counter.SetInParent()
    yield _framed(counter)
    interned = TracePacket(trusted_packet_sequence_id=sequence_id)
    interned.interned_data.event_categories.add(iid=1, name="io")
    interned.interned_data.event_categories.add(iid=2, name="app")
    interned.interned_data.event_names.add(iid=1, name="step")
    interned.timestamp = 0
    interned.track_event.type = INSTANT  # type: ignore[assignment]
    interned.track_event.name = "start"
    interned.track_event.categories.append("app")
    yield _framed(interned)
    events: list[tuple[int, dict[str, object]]] = [
        (1_000_000, {"type": SLICE_BEGIN, "name": "work", "categories": ["app"]}),
        (500_000, {"type": SLICE_BEGIN, "name_iid": 1, "category_iids": [1, 2]}),
        (1_000_000, {"type": SLICE_END}),
        (0, {"type": INSTANT, "name": "tick", "categories": ["app"]}),
        (1_500_000, {"type": SLICE_END}),
    ]
    for number in range(rounds):
        for delta, fields in events:
            packet = TracePacket(trusted_packet_sequence_id=sequence_id, timestamp=delta)
            packet.track_event.SetInParent()
            for name, value in fields.items():
                if isinstance(value, list):
                    getattr(packet.track_event, name).extend(value)
                else:
                    setattr(packet.track_event, name, value)
            yield _framed(packet)
        sample = TracePacket(trusted_packet_sequence_id=sequence_id, timestamp=0)
        sample.track_event.type = COUNTER  # type: ignore[assignment]
        sample.track_event.track_uuid = 3
        sample.track_event.counter_value = number
        yield _framed(sample)
