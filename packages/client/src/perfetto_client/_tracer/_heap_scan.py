"""Finds, fast, the packets of a trace that matter to its heap profiles.

Every packet of a trace is looked at, so this loop is compiled (`_heap_scan.pxd`): a trace of
calls alone costs one pass over its packets' top-level fields and gives nothing back.
"""

from __future__ import annotations

try:
    import cython
except ImportError:  # installed without Cython: runs as pure Python
    from protozero import _cython_shim as cython

from perfetto_service import CorruptTraceError

if not cython.compiled:  # mypy checks the pure build's names
    from perfetto_protos.tags import fields as tags
    from protozero import read_varint
else:
    from cython.cimports.perfetto_protos.tags import fields_c as tags  # type: ignore[no-redef]
    from cython.cimports.protozero._varint import read_varint  # type: ignore[no-redef]

__all__ = ["heap_packets"]


def heap_packets(data: bytes, base: int, found: list[tuple[int, int]]) -> int:
    """Appends to `found` the (start, end) in `data` of each whole TracePacket that holds a
    profile packet, interned data or a clear of its sequence's incremental state; returns
    where the first incomplete packet starts. `base` is `data[0]`'s file offset."""
    buf = data
    end = len(data)
    pos = 0
    while pos < end:
        tag, at = read_varint(buf, pos, end)
        if at < 0:
            return pos
        size, at = read_varint(buf, at, end)
        if at < 0 or size > end - at:
            return pos
        if tag != tags.Trace_packet_TAG:
            raise CorruptTraceError(f"the field at offset {base + pos} is not a TracePacket")
        stop = at + size
        if _wanted(buf, at, stop):
            found.append((at, stop))
        pos = stop
    return pos


def _wanted(buf: bytes, pos: int, end: int) -> bool:
    """Whether the packet in `buf[pos:end]` has one of the fields `heap_packets` looks for."""
    while pos < end:
        tag, pos = read_varint(buf, pos, end)
        if pos < 0:
            return False  # the other readers say what is corrupt
        field_id = tag >> 3
        wire_type = tag & 7
        if wire_type == 0:
            value, pos = read_varint(buf, pos, end)
            if field_id == tags.TracePacket_sequence_flags_ID:
                if value & tags.TracePacket_SequenceFlags_SEQ_INCREMENTAL_STATE_CLEARED:
                    return True
            elif field_id == tags.TracePacket_incremental_state_cleared_ID and value:
                return True
        elif wire_type == 2:
            if field_id in (tags.TracePacket_profile_packet_ID, tags.TracePacket_interned_data_ID):
                return True
            size, pos = read_varint(buf, pos, end)
            if pos < 0 or size > end - pos:
                return False
            pos += size
        elif wire_type == 1:
            pos += 8
        elif wire_type == 5:
            pos += 4
        else:
            return False
        if pos < 0:
            return False
    return False
