"""The packets around the hook's events: batch prologues, descriptors and interned names.

Every batch a thread hands over starts with `batch_prologue`, so a batch decodes on its own
(the flight recorder drops whole batches): incremental state cleared, defaults (the thread's
track, the sequence's incremental clock), a clock snapshot tying that clock to BOOTTIME, and
the thread's track descriptor. Upstream's field numbers; encoded with the generated writers.
"""

from __future__ import annotations

from perfetto_protos.trace.interned_data.interned_data_pbzero import InternedData
from perfetto_protos.trace.trace_packet_pbzero import TracePacket
from perfetto_protos.trace.trace_pbzero import Trace
from protozero import HeapBuffered, encode_tag, encode_varint

from perfetto_client._track_event_writer import source_location_entry
from perfetto_client._tracks import process_uuid

BOOTTIME = 6
INCREMENTAL_CLOCK = 64
SEQ_INCREMENTAL_STATE_CLEARED = 1


def sequence_field(sequence_id: int) -> bytes:
    """The encoded `trusted_packet_sequence_id` field the hook appends to every packet.

    Sequence id 0 writes none (a producer of `traced` must not: the service numbers the
    sequences of its TraceWriters itself).
    """
    if not sequence_id:
        return b""
    return encode_tag(TracePacket.FIELD_TRUSTED_PACKET_SEQUENCE_ID, 0) + encode_varint(sequence_id)


def thread_uuid(tid: int) -> int:
    """The uuid of a thread's track: the client library's, so the program's own track events
    and its calls share one track per thread."""
    return (tid ^ process_uuid()) & 0xFFFF_FFFF_FFFF_FFFF


def process_descriptor(pid: int, name: str, cmdline: list[str], sequence_id: int) -> bytes:
    """The process track's descriptor, framed as a Trace (sequence id 0: none written)."""
    hb = HeapBuffered(Trace)
    packet = hb.msg.add_packet()
    if sequence_id:
        packet.set_trusted_packet_sequence_id(sequence_id)
    track = packet.begin_track_descriptor()
    track.set_uuid(process_uuid())
    process = track.begin_process()
    process.set_pid(pid)
    process.set_process_name(name)
    for arg in cmdline:
        process.add_cmdline(arg)
    return hb.serialize()


def batch_prologue(
    pid: int, tid: int, thread_name: str, sequence_id: int, timestamp_ns: int
) -> bytes:
    """The two packets that open a batch (framed as a Trace; sequence id 0: none written)."""
    hb = HeapBuffered(Trace)
    packet = hb.msg.add_packet()
    if sequence_id:
        packet.set_trusted_packet_sequence_id(sequence_id)
    packet.set_sequence_flags(SEQ_INCREMENTAL_STATE_CLEARED)
    defaults = packet.begin_trace_packet_defaults()
    defaults.set_timestamp_clock_id(INCREMENTAL_CLOCK)
    defaults.begin_track_event_defaults().set_track_uuid(thread_uuid(tid))
    snapshot = packet.begin_clock_snapshot()
    clock = snapshot.add_clocks()
    clock.set_clock_id(BOOTTIME)
    clock.set_timestamp(timestamp_ns)
    clock = snapshot.add_clocks()
    clock.set_clock_id(INCREMENTAL_CLOCK)
    clock.set_timestamp(timestamp_ns)
    clock.set_is_incremental(True)
    packet = hb.msg.add_packet()
    if sequence_id:
        packet.set_trusted_packet_sequence_id(sequence_id)
    track = packet.begin_track_descriptor()
    track.set_uuid(thread_uuid(tid))
    track.set_parent_uuid(process_uuid())
    thread = track.begin_thread()
    thread.set_pid(pid)
    thread.set_tid(tid)
    thread.set_thread_name(thread_name)
    return hb.serialize()


def interned_name(iid: int, name: str, file: str | None = None, line: int = 0) -> bytes:
    """InternedData for one event name (and its source location when `file` is given)."""
    hb = HeapBuffered(InternedData)
    event_name = hb.msg.add_event_names()
    event_name.set_iid(iid)
    event_name.set_name(name)
    if file is None:
        return hb.serialize()
    return hb.serialize() + source_location_entry(iid, file, name, line)
