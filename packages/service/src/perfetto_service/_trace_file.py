"""Reads a trace file in chunks for a decoder, and gives the verdicts every reader shares.

A trace file is a serialized `Trace`: `TracePacket`s as field 1, read here in fixed-size
chunks so that memory stays bounded by the chunk size whatever the file's size. The decoder
consumes whole packets; what it cannot decode is corrupt (`CorruptTraceError`), and the file
is then refused with one line, as is a file that is empty, does not begin with a packet, or
cannot be read (`TraceFileError`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from perfetto_protos.tags.fields import Trace_packet_TAG

from perfetto_service._errors import ServiceError

__all__ = [
    "TRACE_PACKET_TAG",
    "CorruptTraceError",
    "TraceFileEnd",
    "TraceFileError",
    "read_trace_file",
]

TRACE_PACKET_TAG = Trace_packet_TAG
"""The tag of `Trace.packet` (field 1, length-delimited): a trace file's first byte."""

CHUNK_SIZE = 16 << 20


class CorruptTraceError(ServiceError):
    """A packet does not decode; the message says which and where."""


class TraceFileError(ServiceError):
    """The trace file cannot be read or decoded; the message is the one line to print."""


@dataclass(frozen=True)
class TraceFileEnd:
    """How the file ended: its `size` in bytes, and `truncated_at`, the offset of an incomplete
    last packet (of which `truncated_bytes` are there), or None when it ends with a whole one."""

    size: int
    truncated_at: int | None
    truncated_bytes: int


Feed = Callable[[bytes, int], int]
"""Decodes the whole packets at the start of `data` (whose first byte is at file offset
`base`); returns where the first incomplete one starts (len(data) if none). Raises
`CorruptTraceError` for what does not decode."""


def read_trace_file(path: str, feed: Feed, chunk_size: int = CHUNK_SIZE) -> TraceFileEnd:
    """Feeds the trace file at `path` to `feed`, chunk by chunk, each packet exactly once.

    Raises `TraceFileError` when the file cannot be read, is empty, does not begin with a
    TracePacket (what upstream's trace_processor checks first) or holds a corrupt packet.
    """
    try:
        with open(path, "rb") as file:
            chunk = file.read(chunk_size)
            if not chunk:
                raise TraceFileError(f"{path} is not a Perfetto trace (the file is empty)")
            if chunk[0] != TRACE_PACKET_TAG:
                raise TraceFileError(
                    f"{path} is not a Perfetto trace "
                    f"(it begins with byte 0x{chunk[0]:02x}, not a TracePacket)"
                )
            pending = b""
            base = 0  # the file offset of pending[0]
            while chunk:
                data = pending + chunk if pending else chunk
                pos = feed(data, base)
                pending = data[pos:]
                base += pos
                del data
                chunk = file.read(chunk_size)
    except OSError as exc:
        raise TraceFileError(f"cannot read {path}: {exc.strerror}") from None
    except CorruptTraceError as exc:
        raise TraceFileError(f"{path} is corrupt: {exc}") from None
    size = base + len(pending)
    if pending:
        return TraceFileEnd(size, base, len(pending))
    return TraceFileEnd(size, None, 0)
