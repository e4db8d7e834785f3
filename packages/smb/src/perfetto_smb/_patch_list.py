"""Size fields left behind in chunks already handed to the service, waiting for their value."""

from __future__ import annotations

from perfetto_smb._fragments import PATCH_SIZE


class Patch:
    """One 4-byte size field of chunk `chunk_id` at `offset` from the chunk's payload.

    A protozero message writes its size into `size_field` when it is finalized; until then
    the first byte is 0 (a written redundant varint never starts with 0).
    """

    __slots__ = ("chunk_id", "offset", "size_field")

    def __init__(self, chunk_id: int, offset: int) -> None:
        self.chunk_id = chunk_id
        self.offset = offset
        self.size_field = bytearray(PATCH_SIZE)

    def is_patched(self) -> bool:
        """Whether the size has been written."""
        return self.size_field[0] != 0

    def __repr__(self) -> str:
        return f"Patch(chunk_id={self.chunk_id}, offset={self.offset}, {self.size_field.hex()})"
