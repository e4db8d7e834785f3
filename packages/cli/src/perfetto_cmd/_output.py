"""The trace file: opening it as upstream does and appending packets read back."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence

from perfetto_service import TracePacketSlices, trace_file_bytes

from perfetto_cmd._errors import CliError

__all__ = ["TraceOutput"]


class TraceOutput:
    """An output file (or stdout for `-`) that packets are appended to."""

    def __init__(self, path: str, *, no_clobber: bool = False) -> None:
        self.path = path
        self._written = 0
        if path == "-":
            self.fd = os.dup(1)
            return
        flags = os.O_RDWR | os.O_CREAT | (os.O_EXCL if no_clobber else os.O_TRUNC)
        try:
            self.fd = os.open(path, flags, 0o600)
        except FileExistsError:
            raise CliError(
                f"Error: Output file '{path}' already exists, refusing to overwrite due to "
                "'--no-clobber'."
            ) from None
        except OSError as exc:
            raise CliError(f"Failed to open {path}: {exc.strerror}") from None

    @property
    def display_name(self) -> str:
        """How messages name it."""
        return "stdout" if self.path == "-" else self.path

    def write_packets(self, packets: Sequence[TracePacketSlices]) -> None:
        """Appends `packets` framed as `Trace.packet` fields.

        On a write error (e.g. a full disk) a file is cut back to the packets it held before,
        so that it ends on a whole packet, and the `OSError` is raised.
        """
        data = memoryview(trace_file_bytes(packets))
        start = self._written
        try:
            while data:
                written = os.write(self.fd, data)
                self._written += written
                data = data[written:]
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(self.fd, start)
                self._written = start
            raise

    def size(self) -> int:
        """Bytes in the file so far (with what the service wrote into it); a pipe's count."""
        try:
            return os.lseek(self.fd, 0, os.SEEK_END)
        except OSError:
            return self._written

    def remove_if_empty(self) -> None:
        """Deletes the file if nothing was written to it (not stdout)."""
        if self.path != "-" and self.size() == 0:
            with contextlib.suppress(OSError):
                os.unlink(self.path)

    def close(self) -> None:
        """Closes the file."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
