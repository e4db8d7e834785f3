"""The client library in a few lines: a category, a decorated function, a session.

Run: `python examples/client_quickstart.py` writes out.pftrace in the current directory;
open it in https://ui.perfetto.dev.
"""

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
with open("out.pftrace", "wb") as f:
    f.write(session.read_trace())
session.close()
