"""The pure build's `ChunkPackets`: it never binds to a chunk, so every `put` declines and
each packet is written as bytes (`write_packet`).

`_chunk_packets` is the compiled build's, with the same interface; `_track_event_writer`
picks one of them once.
"""

from __future__ import annotations

__all__ = ["ChunkPackets", "annotation_size"]


class ChunkPackets:
    """A sequence's way into a chunk that declines every packet (see the module's docstring)."""

    __slots__ = ("_needs_state",)

    bound = False
    """Whether packets can go into a chunk (never, in the pure build)."""

    def __init__(self, needs_state: bytes) -> None:
        self._needs_state = needs_state

    def bind(self, sink: object) -> None:
        """Leaves every packet to `sink.write_packet`."""

    def unbind(self) -> None:
        """Declines every `put` from now on (as before)."""

    def put(  # noqa: PLR0917 - the compiled build's interface
        self,
        delta: int,
        interned: bytes,
        fields: bytes,
        extra: bytes,
        extra2: bytes,
        extra3: bytes,
        event: bool,
    ) -> bool:
        """False: nothing written."""
        del delta, interned, fields, extra, extra2, extra3, event
        return False

    def put_counter(
        self, delta: int, head: bytes, track_field: bytes, tag: bytes, value: int
    ) -> bool:
        """False: nothing written."""
        del delta, head, track_field, tag, value
        return False

    def put_annotated(
        self,
        delta: int,
        fields: bytes,
        size: int,
        prefixes: tuple[bytes, ...],
        values: tuple[object, ...],
    ) -> bool:
        """False: nothing written."""
        del delta, fields, size, prefixes, values
        return False


def annotation_size(prefix: bytes, value: object) -> int:
    """-1: no value is written into a chunk in the pure build."""
    del prefix, value
    return -1
