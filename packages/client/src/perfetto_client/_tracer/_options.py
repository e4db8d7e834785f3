"""What a recording captures and where it goes."""

from __future__ import annotations

from typing import NamedTuple

DEFAULT_OUTPUT = "trace.pftrace"
DEFAULT_UI_PORT = 9001
"""Where `--open` serves the trace: the port ui.perfetto.dev may fetch from (upstream's)."""
DEFAULT_MAX_SIZE_MB = 1024.0
"""The trace file's size cap unless told otherwise (`--max-size`, `--perfetto-max-size`)."""


class TraceOptions(NamedTuple):
    """Options shared by `perfetto-trace run` and `perfetto_client.record`.

    `include`/`exclude` are globs matched against a function's module name (a pattern also
    matches the module's submodules) and its file path. `max_depth` 0 means unlimited;
    `min_duration_ns` drops shorter slices before they are written; `exception_types` names
    each exception's type where it is raised (compiled hook, a trace function: slower);
    `ring_mb` > 0 keeps only the last that many megabytes (flight recorder); with a ring,
    each of the program's `Tracing.activate_triggers` naming one of `snapshot_triggers`
    writes a snapshot (as upstream's CLONE_SNAPSHOT trigger mode: the recording goes on).
    `client_events` also records the program's own track events (perfetto_client API) once
    it initializes tracing; `otel` (OpenTelemetry spans) and `log_level` (records of the
    root logger from that level on) start that session at once. `system` sends the calls
    to the system's `traced` instead of `output` (see `_system_sink.py`). `max_size_mb` caps
    the trace file (and each child's part) as upstream's `max_file_size_bytes` does; 0 means
    no cap (see `_sink.SinkStats.admit`). `sched` also records every CPU's scheduling (ftrace)
    and the processes and threads it names into `output` (see `_sched.py`).
    """

    output: str = DEFAULT_OUTPUT
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    max_depth: int = 0
    min_duration_ns: int = 0
    c_calls: bool = True
    gc: bool = True
    exceptions: bool = True
    exception_types: bool = False
    ring_mb: float = 0.0
    snapshot_triggers: tuple[str, ...] = ()
    follow_children: bool = False
    system: bool = False
    client_events: bool = True
    otel: bool = False
    log_level: int | None = None
    pure: bool = False
    max_size_mb: float = DEFAULT_MAX_SIZE_MB
    sched: bool = False
