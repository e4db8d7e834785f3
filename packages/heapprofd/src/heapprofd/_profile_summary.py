"""What a recorded heap profile lost, per process, in lines for heap_profile to print."""

from __future__ import annotations

from perfetto_protos.tags.fields import Trace_packet_ID, TracePacket_profile_packet_ID
from perfetto_protos.trace.profiling.profile_packet_pb2 import ProfilePacket
from protozero import ProtoDecoder

from heapprofd._bookkeeping import MAX_HEAPS_PER_PROCESS

__all__ = ["profile_losses"]


def profile_losses(trace: bytes) -> list[str]:
    """One line per process whose heap dumps in `trace` say that data was lost or refused."""
    overran: set[int] = set()
    corrupted: set[int] = set()
    guardrail: set[int] = set()
    for packet in _profile_packets(trace):
        for dump in packet.process_dumps:
            if dump.buffer_overran:
                overran.add(dump.pid)
            if dump.buffer_corrupted:
                corrupted.add(dump.pid)
            if dump.hit_guardrail:
                guardrail.add(dump.pid)
    lines = []
    for pid in sorted(overran | corrupted | guardrail):
        if pid in overran:
            lines.append(
                f"pid {pid}: its ring buffer overran and samples were lost"
                " (--block-client loses none; --shmem-size makes it larger)"
            )
        if pid in corrupted:
            lines.append(f"pid {pid}: it wrote a corrupt record and was disconnected")
        if pid in guardrail:
            lines.append(
                f"pid {pid}: heapprofd hit a guardrail (its memory bound, or more than"
                f" {MAX_HEAPS_PER_PROCESS} heaps in the process) and the profile is partial"
            )
    return lines


def _profile_packets(trace: bytes) -> list[ProfilePacket]:
    return [
        ProfilePacket.FromString(bytes(field.as_bytes()))
        for packet in ProtoDecoder(trace)
        if packet.id == Trace_packet_ID
        for field in packet.as_message()
        if field.id == TracePacket_profile_packet_ID
    ]
