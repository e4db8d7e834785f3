"""What a session's TraceStats say was lost, as the line `perfetto` prints when it ends."""

from __future__ import annotations

from perfetto_protos.common.trace_stats_pb2 import TraceStats

_BUFFER_LOSSES = (
    ("trace_writer_packet_loss", "times a producer's writer dropped packets (its shared memory "
     "buffer was full)"),
    ("chunks_overwritten", "chunks overwritten before they were read (the ring buffer wrapped)"),
    ("chunks_discarded", "chunks discarded (a DISCARD buffer was full)"),
    ("patches_failed", "patches that found no chunk (packets left incomplete)"),
    ("abi_violations", "chunks or fragments a producer wrote wrongly"),
)  # fmt: skip
_SERVICE_LOSSES = (
    ("chunks_discarded", "chunks committed to no buffer of the producer's"),
    ("patches_discarded", "patches for no buffer of the producer's"),
    ("invalid_packets", "packets refused (fields only the service may write, or malformed)"),
)


def loss_line(stats: TraceStats) -> str:
    """'Data lost: ...' naming every nonzero loss counter and what it means, or '' if none."""
    parts = []
    for name, meaning in _BUFFER_LOSSES:
        total = sum(getattr(buffer, name) for buffer in stats.buffer_stats)
        if total:
            parts.append(f"{total} {meaning} [{name}]")
    for name, meaning in _SERVICE_LOSSES:
        value = getattr(stats, name)
        if value:
            parts.append(f"{value} {meaning} [{name}]")
    if stats.final_flush_outcome == TraceStats.FINAL_FLUSH_FAILED:
        parts.append("the final flush failed: data still in producers may be missing")
    return "Data lost: " + "; ".join(parts) if parts else ""
