"""The client API's track events written straight into a recording's sink.

`SinkTrackEvents` is a running track_event instance (every category, every tag) without a
tracing service: each thread's sequence frames its packets with its own sequence id and hands
them to the sink in batches, counting the events among them. Its events go on the thread
tracks the recorder's calls use, so the two nest in one timeline.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

from perfetto_protos.tags.fields import (
    Trace_packet_TAG,
    TracePacket_track_event_ID,
    TracePacket_trusted_packet_sequence_id_TAG,
)
from protozero import ProtoDecoder, encode_varint

from perfetto_client._categories import registry
from perfetto_client._tracer._sink import Sink
from perfetto_client._track_event import TrackEventInstance, thread_writers, watch_thread_names
from perfetto_client._track_event_writer import load_encoders

_PACKET_TAG = encode_varint(Trace_packet_TAG)
_SEQUENCE_ID_TAG = encode_varint(TracePacket_trusted_packet_sequence_id_TAG)
_TRACK_EVENT_FIELD = TracePacket_track_event_ID
_BATCH_BYTES = 64 << 10
_SEQUENCE_IDS = (1 << 14) - 1
"""Sequence ids 1..16383: below the recorder's own (its threads' batches)."""


class _EveryCategory:
    """The TrackEventConfig fields a track_event instance reads: every category and tag, no
    thread time (the generated protobuf class costs more to import than a small test run)."""

    enabled_categories: tuple[str, ...] = ("*",)
    disabled_categories: tuple[str, ...] = ()
    enabled_tags: tuple[str, ...] = ("*",)
    disabled_tags: tuple[str, ...] = ()
    enable_thread_time_sampling = False
    thread_time_subsampling_ns = 0


class _Sequence:
    """One thread's packets for the sink (a `perfetto_smb.TraceWriter` look-alike)."""

    def __init__(self, owner: SinkTrackEvents, sequence_id: int) -> None:
        self.on_resume: Callable[[], None] | None = None  # the sink never drops and resumes
        self._owner = owner
        self._seq = _SEQUENCE_ID_TAG + encode_varint(sequence_id)
        self._parts: list[bytes] = []
        self._size = 0
        self._events = 0
        self._pid = os.getpid()
        self._lock = threading.Lock()

    def write_packet(self, data: bytes) -> None:
        """Adds one encoded TracePacket (its sequence id appended)."""
        body = data + self._seq
        part = _PACKET_TAG + encode_varint(len(body)) + body
        with self._lock:
            if self._owner.stopped:
                if _is_event(data):
                    self._owner.late_events += 1
                return
            self._parts.append(part)
            self._size += len(part)
            if _is_event(data):
                self._events += 1
            full = self._size >= _BATCH_BYTES
        if full:
            self.flush()

    def flush(self) -> None:
        """Hands the buffered packets to the sink (in a forked child: drops them)."""
        with self._lock:
            parts, events = self._parts, self._events
            self._parts, self._size, self._events = [], 0, 0
        if not parts or self._pid != os.getpid():
            return
        self._owner.write(b"".join(parts), events)

    def close(self) -> None:
        """Flushes (the thread's writer for a stopped instance is closed on its next event)."""
        self.flush()


def _is_event(packet: bytes) -> bool:
    return any(field.id == _TRACK_EVENT_FIELD for field in ProtoDecoder(packet))


class SinkTrackEvents:
    """Records the process's track events into `sink` from `start()` to `stop()`.

    Sequence ids count up from `first_sequence_id` (distinct per process writing into one
    trace: their incremental state spans the whole recording).
    """

    def __init__(self, sink: Sink, first_sequence_id: int = 1) -> None:
        self.sink = sink
        self.stopped = False
        self.late_events = 0
        """Events written after `stop()` (by a thread still holding its writer): not recorded."""
        self.write_error: OSError | None = None
        self._next_id = first_sequence_id - 1
        self._sequences: list[_Sequence] = []
        self._lock = threading.Lock()
        self.instance = TrackEventInstance(0, _EveryCategory(), self._new_sequence)

    def _new_sequence(self) -> _Sequence:
        with self._lock:
            sequence_id = self._next_id % _SEQUENCE_IDS + 1
            self._next_id += 1
            sequence = _Sequence(self, sequence_id)
            self._sequences.append(sequence)
        return sequence

    def write(self, data: bytes, events: int) -> None:
        """Takes one batch of a sequence (a write error is kept: the sink counts it lost)."""
        try:
            self.sink.write(data, events)
        except OSError as exc:
            self.write_error = self.write_error or exc

    def start(self) -> None:
        """From now on, every enabled category's events are recorded. The calling thread's
        sequence starts now: its first event costs no more than the next."""
        load_encoders()
        watch_thread_names()
        registry.start_instance(self.instance)
        thread_writers(1 << self.instance.slot)

    def flush(self) -> None:
        """Hands every sequence's packets so far to the sink."""
        with self._lock:
            sequences = list(self._sequences)
        for sequence in sequences:
            sequence.flush()

    def stop(self) -> None:
        """Stops recording and hands every sequence's packets to the sink."""
        self.instance.stopped = True
        registry.stop_instance(self.instance)
        self.stopped = True
        self.flush()
