"""The client library in a few lines: a category, a decorated function, a session.

Run: `python examples/client_quickstart.py [out.pftrace]` writes the trace (out.pftrace in the
current directory by default); open it in https://ui.perfetto.dev.
"""

import sys

import perfetto_client as pc
from perfetto_client import Backend, Tracing

RENDERING = pc.Category("rendering", description="drawing frames")


@pc.trace(RENDERING)  # each call is a slice named "draw"
def draw() -> None:
    pc.instant(RENDERING, "drawn")


Tracing.initialize(Backend.IN_PROCESS)
with Tracing.new_trace() as session:  # records every default-enabled category
    draw()
    with pc.trace_event(RENDERING, "upload", size=4096, texture="sky"):
        pc.counter(RENDERING, "textures", 12)
with open(sys.argv[1] if len(sys.argv) > 1 else "out.pftrace", "wb") as f:
    f.write(session.read_trace())
session.close()
