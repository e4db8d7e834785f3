"""Writes N instant events as fast as it can through a 16 KiB shared memory buffer.

`fill_smb_main.py MODE N > trace`: MODE `default` (nothing asked: STALL_THEN_DROP), `drop`
(the session's data source config asks for BUFFER_EXHAUSTED_DROP), `config-stall` (it asks
for BUFFER_EXHAUSTED_STALL_THEN_DROP) or `registered-stall`
(`Tracing.initialize(track_event_buffer_exhausted_policy=STALL)`). In `drop` mode, 1000
"after" events follow once the service has drained the buffer. Writes the in-process
session's trace to stdout.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

import perfetto_client as pc
from perfetto_client import Backend, BufferExhaustedPolicy, Tracing, _tracing

mode, count = sys.argv[1], int(sys.argv[2])
Tracing.initialize(
    Backend.IN_PROCESS,
    shmem_size_hint_kb=16,
    track_event_buffer_exhausted_policy=(
        BufferExhaustedPolicy.STALL if mode == "registered-stall" else None
    ),
)
CAT = pc.Category("fill")
source: dict[str, Any] = {"name": "track_event"}
if mode == "config-stall":
    source["buffer_exhausted_policy"] = "BUFFER_EXHAUSTED_STALL_THEN_DROP"
elif mode == "drop":
    source["buffer_exhausted_policy"] = "BUFFER_EXHAUSTED_DROP"
session = Tracing.new_trace()
session.setup({"buffers": [{"size_kb": 16384}], "data_sources": [{"config": source}]})
session.start()
service_busy = threading.Event()
if mode == "drop":
    # The in-process service's loop waits until the events are written: nothing drains the
    # buffer meanwhile, and a writer that never waits must drop.
    in_process = _tracing._state.in_process
    assert in_process is not None
    in_process.post(service_busy.wait)
for i in range(count):
    pc.instant(CAT, "event", i=i)
if mode == "drop":
    # The service drains the buffer now; events written after that say some were dropped.
    service_busy.set()
    session.flush()
    # Like upstream's, a dropping writer asks for a chunk again once it has filled its
    # garbage chunk: the first events after that carry the data loss mark.
    for _ in range(1000):
        pc.instant(CAT, "after")
session.stop()
sys.stdout.buffer.write(session.read_trace())
session.close()
