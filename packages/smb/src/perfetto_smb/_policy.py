"""What a TraceWriter does when the shared memory buffer has no free chunk."""

from __future__ import annotations

import enum


class BufferExhaustedPolicy(enum.Enum):
    """What a TraceWriter does when no chunk is free."""

    STALL = "stall"
    """Wait for a chunk; after the arbiter's `stall_timeout` seconds raise SmbError."""
    DROP = "drop"
    """Write into a throwaway chunk; the next packet says previous_packet_dropped."""
    STALL_THEN_DROP = "stall_then_drop"
    """Wait for a chunk; after the arbiter's `stall_timeout` seconds drop like DROP."""
