"""The pure build's batch of TracePackets: a bytearray, each packet made of bytes pieces.

`_packet_batch` is the compiled build's, with the same interface and the same bytes (see its
docstring); a property test drives both with the same operations.
"""

from __future__ import annotations

import time

from perfetto_protos.tags.fields import (
    Trace_packet_TAG,
    TracePacket_interned_data_TAG,
    TracePacket_timestamp_TAG,
    TracePacket_track_event_TAG,
    TrackEvent_name_iid_TAG,
    TrackEvent_source_location_iid_TAG,
    TrackEvent_type_TAG,
    TrackEvent_Type_TYPE_SLICE_BEGIN,
)
from protozero import encode_varint
from protozero._proto_utils import SHORT_VARINTS

__all__ = ["PacketBatch", "now_ns", "write_event", "write_interned_event"]

_CLOCK = time.CLOCK_BOOTTIME
_PACKET = encode_varint(Trace_packet_TAG)
_TIMESTAMP = encode_varint(TracePacket_timestamp_TAG)
_TRACK_EVENT = encode_varint(TracePacket_track_event_TAG)
_INTERNED_DATA = encode_varint(TracePacket_interned_data_TAG)
_TYPE = encode_varint(TrackEvent_type_TAG)
_NAME_IID = encode_varint(TrackEvent_name_iid_TAG)
_SOURCE_LOCATION_IID = encode_varint(TrackEvent_source_location_iid_TAG)


def now_ns() -> int:
    """CLOCK_BOOTTIME in nanoseconds (the clock every timestamp uses)."""
    return time.clock_gettime_ns(_CLOCK)


class PacketBatch:
    """A thread's packets being batched (see `_packet_batch.PacketBatch`)."""

    __slots__ = ("_buf", "_events", "_seq", "last_ts", "pos")

    def __init__(self, seq: bytes, size: int) -> None:
        del size  # a bytearray grows by itself
        if len(seq) > 8:
            raise ValueError("sequence id field too long")
        self._seq = seq
        self._buf = bytearray()
        # The TrackEvent field of each (kind, iid, location) written: they repeat.
        self._events: dict[tuple[int, int, bool], bytes] = {}
        self.pos = 0
        self.last_ts = 0

    def start(self, prologue: bytes, ts: int) -> None:
        """Empties the batch and opens it with `prologue`; deltas count from `ts`."""
        self._buf[:] = prologue
        self.pos = len(prologue)
        self.last_ts = ts

    def write(self, kind: int, iid: int, ts: int, location: bool, blob: bytes = b"") -> int:
        """Appends a TrackEvent (see `_packet_batch.PacketBatch.write`)."""
        key = (kind, iid, location)
        event = self._events.get(key)
        if event is None:
            fields = _TYPE + SHORT_VARINTS[kind]
            if iid:
                fields += _NAME_IID + encode_varint(iid)
                if location and kind == TrackEvent_Type_TYPE_SLICE_BEGIN:
                    fields += _SOURCE_LOCATION_IID + encode_varint(iid)
            event = self._events[key] = _TRACK_EVENT + SHORT_VARINTS[len(fields)] + fields
        delta = ts - self.last_ts
        self.last_ts = ts
        body = _TIMESTAMP + (SHORT_VARINTS[delta] if 0 <= delta < 16384 else encode_varint(delta))
        body += event
        if blob:
            body += _INTERNED_DATA + encode_varint(len(blob)) + blob
        body += self._seq
        buf = self._buf
        buf += _PACKET
        buf += SHORT_VARINTS[len(body)] if len(body) < 16384 else encode_varint(len(body))
        buf += body
        self.pos = len(buf)
        return 0

    def data(self) -> bytes:
        """The batch's bytes: its packets, framed as a Trace."""
        return bytes(self._buf)

    def clear(self) -> None:
        """Drops the batch's bytes."""
        self._buf.clear()
        self.pos = 0


write_event = PacketBatch.write
"""`write_event(batch, kind, iid, ts, location)` is `batch.write(...)` without interned data
(the compiled build inlines it)."""
write_interned_event = PacketBatch.write
"""`write_interned_event(batch, kind, iid, ts, location, blob)` is `batch.write(...)` (the
compiled build inlines it)."""
