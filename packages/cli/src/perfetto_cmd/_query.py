"""`--query`: the service state as upstream's human-readable tables."""

from __future__ import annotations

import os

from perfetto_protos.common.tracing_service_state_pb2 import TracingServiceState

__all__ = ["format_service_state"]

_CATEGORIES_SHORT = 40


def _categories(source: TracingServiceState.DataSource) -> list[str]:
    descriptor = source.ds_descriptor
    if descriptor.HasField("track_event_descriptor"):
        return [c.name for c in descriptor.track_event_descriptor.available_categories]
    if descriptor.HasField("ftrace_descriptor"):
        return [c.name for c in descriptor.ftrace_descriptor.atrace_categories]
    return []


def format_service_state(state: TracingServiceState, *, long: bool = False) -> str:
    """The text `perfetto --query` prints for `state`."""
    lines = [
        "\x1b[31mNot meant for machine consumption. Use --query-raw for scripts.\x1b[0m",
        "",
        f"Service: {state.tracing_service_version}",
        f"Tracing sessions: {state.num_sessions} (started: {state.num_sessions_started})",
        "",
        "",
        "PRODUCER PROCESSES CONNECTED:",
        "",
        f"{'ID':<6} {'PID':<8} {'UID':<8} {'FLAGS':<6} {'NAME':<42} SDK",
        f"{'==':<6} {'===':<8} {'===':<8} {'=====':<6} {'====':<42} ===",
    ]
    names: dict[int, str] = {}
    for producer in state.producers:
        names[producer.id] = producer.name
        flags = "F" if producer.frozen else ""
        lines.append(
            f"{producer.id:<6} {producer.pid:<8} {producer.uid:<8} {flags:<6} "
            f"{producer.name:<42} {producer.sdk_version}"
        )
    lines += [
        "",
        "",
        "DATA SOURCES REGISTERED:",
        "",
        f"{'NAME':<40} {'PRODUCER':<28} DETAILS",
        f"{'===':<40} {'========':<28} ========",
    ]
    for source in state.data_sources:
        owner = ""
        if source.producer_id in names:
            owner = f"{names[source.producer_id]} ({source.producer_id})"
        categories = ",".join(_categories(source))
        if not long and len(categories) > _CATEGORIES_SHORT:
            categories = categories[:_CATEGORIES_SHORT] + "... (use --long to expand)"
        lines.append(f"{source.ds_descriptor.name:<40} {owner:<28} {categories}")
    if state.supports_tracing_sessions:
        lines += [
            "",
            "",
            "TRACING SESSIONS:",
            "",
            "ID      UID     STATE      BUF (#) KB   DUR (s)   #DS  STARTED  NAME",
            "===     ===     =====      ==========   =======   ===  =======  ====",
        ]
        for session in state.tracing_sessions:
            seconds = session.start_realtime_ns // 1_000_000_000 % 86400
            started = f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
            buffers = f"({len(session.buffer_size_kb)})"
            lines.append(
                f"{session.id:<7} {session.consumer_uid:<7} {session.state:<10} {buffers} "
                f"{sum(session.buffer_size_kb):<8} {session.duration_ms // 1000:<9} "
                f"{session.num_data_sources:<4} {started} {session.unique_session_name}"
            )
        if len(state.tracing_sessions) != state.num_sessions and os.getuid() != 0:
            lines += [
                "",
                "NOTE: Some tracing sessions are not reported in the list above.",
                "This is likely because they are owned by a different UID.",
                "If you want to list all session, run again this command as root.",
            ]
    return "\n".join(lines) + "\n"
