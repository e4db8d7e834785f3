"""The one line a bridge the program wired itself prints when nothing can record it."""

from __future__ import annotations

import sys

from perfetto_client._categories import registry
from perfetto_client._tracing import Tracing

__all__ = ["tell_if_nowhere_to_write"]


def tell_if_nowhere_to_write(bridge: str) -> None:
    """Says on stderr that `bridge` (a handler or span processor) has nowhere to write, when
    tracing is not set up in this process at all: no session records anything and the program
    never called `Tracing.initialize` (as `logging` says when a record finds no handler).

    The bridges call it once, on their first record or span while their category is off.
    """
    if registry.instances or Tracing.is_initialized():
        return
    print(
        f"perfetto_client: {bridge} has nowhere to write: no tracing session in this process "
        "(run the program with `perfetto-trace run`, or call "
        "perfetto_client.Tracing.initialize() and start a session)",
        file=sys.stderr,
    )
