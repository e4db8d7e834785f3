"""Writes N instant events as fast as it can through a 16 KiB shared memory buffer.

`fill_smb_main.py MODE N > trace`: MODE `drop` (the default policy), `config-stall` (the
session's data source config asks for BUFFER_EXHAUSTED_STALL_THEN_DROP) or
`registered-stall` (`Tracing.initialize(track_event_buffer_exhausted_policy=STALL)`).
Writes the in-process session's trace to stdout.
"""

from __future__ import annotations

import sys
from typing import Any

import perfetto_client as pc
from perfetto_client import Backend, BufferExhaustedPolicy, Tracing

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
session = Tracing.new_trace()
session.setup({"buffers": [{"size_kb": 16384}], "data_sources": [{"config": source}]})
session.start()
for i in range(count):
    pc.instant(CAT, "event", i=i)
session.stop()
sys.stdout.buffer.write(session.read_trace())
session.close()
