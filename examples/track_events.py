"""Track events from a Python program: slices, arguments, counters, tracks, flows, asyncio.

Run: `python examples/track_events.py [out.pftrace]` (default: track_events.pftrace in the
current directory), then open the file in https://ui.perfetto.dev.
"""

from __future__ import annotations

import asyncio
import sys
import threading

import perfetto_client as pc
from perfetto_client import Backend, Tracing

RENDERING = pc.Category("rendering", description="drawing frames")
NETWORK = pc.Category("network", description="requests", tags=("io",))


@pc.trace(RENDERING)
def draw_layer(index: int) -> None:
    pc.instant(RENDERING, "layer drawn", index=index)


@pc.trace(RENDERING, "frame")
def draw_frame(frame: int) -> None:
    for index in range(3):
        draw_layer(index)
    pc.counter(RENDERING, "frames drawn", frame + 1)


def worker(flow: pc.Flow) -> None:
    with pc.trace_event(NETWORK, "fetch", url="https://example.org", attempt=1):
        pc.instant(NETWORK, "response", terminating_flow=flow, status=200)


async def poll(name: str) -> None:
    with pc.trace_event(NETWORK, f"poll {name}"):  # on the task's own track
        await asyncio.sleep(0.01)


async def main_async() -> None:
    await asyncio.gather(poll("a"), poll("b"))


def main() -> None:
    out = sys.argv[1] if len(sys.argv) > 1 else "track_events.pftrace"
    Tracing.initialize(Backend.IN_PROCESS)
    with Tracing.new_trace() as session:  # starts here, stops at the end of the block
        for frame in range(5):
            draw_frame(frame)
        flow = pc.Flow(1)
        pc.instant(NETWORK, "request sent", flow=flow)
        thread = threading.Thread(target=worker, args=(flow,), name="network worker")
        thread.start()
        thread.join()
        queue = pc.NamedTrack("queue")
        pc.begin(NETWORK, "queued", track=queue, size=3)
        pc.end(NETWORK, track=queue)
        asyncio.run(main_async())
    data = session.read_trace()
    session.close()
    with open(out, "wb") as f:
        f.write(data)
    print(f"wrote {out} ({len(data)} bytes): open it in https://ui.perfetto.dev")


if __name__ == "__main__":
    main()
