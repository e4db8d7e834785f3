"""An application that records a large SYSTEM session and reads it back, for the test of a
read cut short. Prints `reading` once the first part of the trace arrives, then `read N`
(bytes) or `error: MESSAGE` (the TracingError `read_trace` raised)."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Sequence

import perfetto_client as pc
from perfetto_client import Backend, Tracing, TracingError
from perfetto_service import TracePacketSlices

CAT = pc.Category("app")
EVENTS = 20_000
PAYLOAD = "x" * 1000  # ~20 MB of trace: far more than the sockets between traced and us hold


def main() -> None:
    Tracing.initialize(Backend.SYSTEM)
    session = Tracing.new_trace(Backend.SYSTEM)
    session.setup(
        {"buffers": [{"size_kb": 32 * 1024}], "data_sources": [{"config": {"name": "track_event"}}]}
    )
    session.start()
    deadline = time.monotonic() + 50  # the test waits 60 for a line
    while not pc.is_enabled(CAT):
        if time.monotonic() > deadline:
            sys.exit("read_cut_main: the session never started")
        time.sleep(0.01)
    for number in range(EVENTS):
        pc.instant(CAT, "big", number=number, payload=PAYLOAD)
        if number % 50 == 0:
            time.sleep(0.002)  # at a pace the service keeps up with: no chunk is dropped
    session.stop()
    on_trace_data = session.on_trace_data
    said = threading.Event()

    def first_data_says_reading(packets: Sequence[TracePacketSlices], has_more: bool) -> None:
        if not said.is_set():
            said.set()
            print("reading", flush=True)  # traced streams the trace now
        on_trace_data(packets, has_more)

    session.on_trace_data = first_data_says_reading  # type: ignore[method-assign]
    try:
        data = session.read_trace()
    except TracingError as exc:
        print(f"error: {exc}", flush=True)
    else:
        print(f"read {len(data)}", flush=True)
    session.close()


if __name__ == "__main__":
    main()
