"""The `perfetto-trace` command's entry point: SIGUSR1 is held from its first line
(`_snapshot_signal`), before any module of the tracer (`_tracer/`) loads."""

from __future__ import annotations

from perfetto_client import _snapshot_signal

__all__ = ["main"]


def main() -> int:
    """`perfetto-trace`."""
    _snapshot_signal.hold()
    # Imported once the signal is held: loading the command line and the recorder takes a
    # while, and a SIGUSR1 meanwhile would end the program.
    from perfetto_client._tracer._cli import main as perfetto_trace

    return perfetto_trace()
