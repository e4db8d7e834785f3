"""The packets around the hook's events: batch prologues, descriptors and interned names.

Every batch a thread hands over starts with `batch_prologue`, so a batch decodes on its own
(the flight recorder drops whole batches): incremental state cleared, defaults (the thread's
track, the sequence's incremental clock), a clock snapshot tying that clock to BOOTTIME, and
the thread's track descriptor. Upstream's field numbers; encoded by the client library's
track event encoders (the generated writers of TracePacket load every message it may nest:
more than a short program's whole run costs).
"""

from __future__ import annotations

from perfetto_protos.tags.fields import Trace_packet_TAG, TracePacket_trusted_packet_sequence_id_TAG
from protozero import encode_varint

from perfetto_client._track_event_writer import (
    clock_snapshot_packet,
    event_name_entry,
    load_encoders,
    process_descriptor_packet,
    source_location_entry,
    thread_descriptor_packet,
    varint,
)
from perfetto_client._tracks import process_uuid

BOOTTIME = 6
_SEQUENCE_ID = encode_varint(TracePacket_trusted_packet_sequence_id_TAG)
_PACKET = encode_varint(Trace_packet_TAG)

load_encoders()


def sequence_field(sequence_id: int) -> bytes:
    """The encoded `trusted_packet_sequence_id` field the hook appends to every packet.

    Sequence id 0 writes none (a producer of `traced` must not: the service numbers the
    sequences of its TraceWriters itself).
    """
    if not sequence_id:
        return b""
    return _SEQUENCE_ID + varint(sequence_id)


def framed(packet: bytes, sequence_id: int) -> bytes:
    """`packet` (a TracePacket's fields) as a Trace.packet field, with its sequence id."""
    body = packet + sequence_field(sequence_id)
    return _PACKET + varint(len(body)) + body


def thread_uuid(tid: int) -> int:
    """The uuid of a thread's track: the client library's, so the program's own track events
    and its calls share one track per thread."""
    return (tid ^ process_uuid()) & 0xFFFF_FFFF_FFFF_FFFF


def process_descriptor(pid: int, name: str, cmdline: list[str], sequence_id: int) -> bytes:
    """The process track's descriptor, framed as a Trace (sequence id 0: none written)."""
    return framed(process_descriptor_packet(process_uuid(), pid, name, cmdline), sequence_id)


def batch_prologue(
    pid: int, tid: int, thread_name: str, sequence_id: int, timestamp_ns: int
) -> bytes:
    """The two packets that open a batch (framed as a Trace; sequence id 0: none written)."""
    track = thread_uuid(tid)
    return framed(clock_snapshot_packet(timestamp_ns, BOOTTIME, track), sequence_id) + framed(
        thread_descriptor_packet(track, process_uuid(), pid, tid, thread_name), sequence_id
    )


def interned_name(iid: int, name: str, file: str | None = None, line: int = 0) -> bytes:
    """InternedData for one event name (and its source location when `file` is given)."""
    if file is None:
        return event_name_entry(iid, name)
    return event_name_entry(iid, name) + source_location_entry(iid, file, name, line)
