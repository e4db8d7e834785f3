"""The live progress line shown on a terminal while a session runs (upstream has none)."""

from __future__ import annotations

import sys
import time

__all__ = ["ProgressLine"]


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n:.1f} GiB"


class ProgressLine:
    """Rewrites one stderr line: elapsed time (of the TTL) and bytes in the buffers so far."""

    def __init__(self) -> None:
        self._last_poll = 0.0
        self._shown = False

    def due(self, period_s: float) -> bool:
        """Whether it is time to ask the service for fresh stats."""
        now = time.monotonic()
        if now - self._last_poll >= period_s:
            self._last_poll = now
            return True
        return False

    def show(self, elapsed_s: float, ttl_s: float, buffer_bytes: int) -> None:
        """Redraws the line."""
        of = f" of {ttl_s:.0f}s" if ttl_s else ""
        text = f"Tracing: {elapsed_s:.0f}s{of}, {_size(buffer_bytes)} in the buffers (Ctrl-C stops)"
        sys.stderr.write("\r\x1b[K" + text)
        sys.stderr.flush()
        self._shown = True

    def clear(self) -> None:
        """Erases the line (before any other message)."""
        if self._shown:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()
            self._shown = False
