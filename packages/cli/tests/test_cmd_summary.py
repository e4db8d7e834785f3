"""`perfetto --summary`: what it reports about traces we build and traces the command wrote."""

from __future__ import annotations

import gzip
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from cmdlib import BIN, Producer, Traced, perfetto
from perfetto_cmd import _summary
from perfetto_protos.upstream import upstream_pool
from tracegen import sdk_like_packets


def _row(text: str, *starts: str) -> list[str]:
    for line in text.splitlines():
        words = line.split()
        if words[: len(starts)] == list(starts):
            return words
    raise AssertionError(f"no row {starts} in:\n{text}")


def test_track_events_counters_processes_with_interning_and_incremental_clocks(
    tmp_path: Path,
) -> None:
    path = tmp_path / "sdk.pftrace"
    path.write_bytes(b"".join(sdk_like_packets(rounds=10)))
    result = perfetto(None, "--summary", str(path))
    assert result.returncode == 0, result.stderr
    text = result.stdout.decode()
    assert _row(text, "track_event") == ["track_event", str(10 * 6 + 1)]
    assert _row(text, "app", "work") == ["app", "work", "10", "30.000", "3.000"]
    assert _row(text, "io,app", "step") == ["io,app", "step", "10", "10.000", "1.000"]
    assert _row(text, "app", "tick") == ["app", "tick", "10", "(instant)"]
    assert _row(text, "queue_depth") == ["queue_depth", "10", "0", "9", "9"]
    assert "Processes: 1, threads: 1" in text
    assert _row(text, "pid", "100") == ["pid", "100", "demo"]
    assert _row(text, "tid", "101") == ["tid", "101", "main"]
    assert "packets that follow lost ones on their sequence: 0" in text


def test_a_truncated_trace_is_summarized_up_to_the_cut(tmp_path: Path) -> None:
    data = b"".join(sdk_like_packets(rounds=3))
    path = tmp_path / "cut.pftrace"
    path.write_bytes(data[:-3])
    result = perfetto(None, "--summary", str(path))
    assert result.returncode == 0
    assert b"truncated: the last packet is incomplete" in result.stdout


def test_streams_in_chunks(tmp_path: Path) -> None:
    (tmp_path / "t").write_bytes(b"".join(sdk_like_packets(rounds=50)))
    # Packets straddle every chunk boundary.
    summary = _summary.summarize(str(tmp_path / "t"), chunk_size=97)
    assert summary.slices["app", "work"].count == 50
    assert summary.counters["queue_depth"].count == 50
    assert summary.truncated_at is None


def test_unreadable_and_non_trace_files_are_one_line_errors(tmp_path: Path) -> None:
    missing = perfetto(None, "--summary", str(tmp_path / "nope"))
    assert missing.returncode == 1
    assert len(missing.stderr.decode().splitlines()) == 1
    (tmp_path / "text").write_bytes(b"\x0f\x0fnot a trace at all")
    garbage = perfetto(None, "--summary", str(tmp_path / "text"))
    assert garbage.returncode == 1
    assert garbage.stderr.decode().startswith(f"perfetto: {tmp_path / 'text'} is not a Perfetto")


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (b"hello, this is a text file\n", "it begins with byte 0x68, not a TracePacket"),
        (b'{"traceEvents": []}', "it begins with byte 0x7b, not a TracePacket"),
        (gzip.compress(b"\x0a\x00" * 100), "it begins with byte 0x1f, not a TracePacket"),
        (b"\nlines of text after an empty line\n", "no complete TracePacket in it"),
        (b"", "the file is empty"),
    ],
    ids=["text", "json", "gzip", "text-after-an-empty-line", "empty"],
)
def test_a_file_that_is_not_a_trace_is_one_line_and_status_1(
    tmp_path: Path, content: bytes, why: str
) -> None:
    (tmp_path / "notes.txt").write_bytes(content)
    result = subprocess.run(
        [str(BIN / "perfetto"), "--summary", "notes.txt"],
        cwd=tmp_path,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert result.stdout == b""
    assert result.stderr.decode() == f"perfetto: notes.txt is not a Perfetto trace ({why})\n"
    assert result.returncode == 1


def test_summary_of_a_trace_the_command_wrote(
    traced: Traced, producer: Callable[..., Producer], tmp_path: Path
) -> None:
    producer(count=30)
    out = tmp_path / "t"
    text = 'buffers { size_kb: 256 } data_sources { config { name: "test.ds" } } duration_ms: 300'
    assert perfetto(traced, "--txt", "-c", "-", "-o", str(out), input=text.encode()).returncode == 0
    summary = perfetto(None, "--summary", str(out)).stdout.decode()
    assert _row(summary, "for_testing") == ["for_testing", "30"]
    assert _row(summary, "trace_config") == ["trace_config", "1"]
    assert "TraceStats (last):" in summary


def test_field_numbers_match_upstreams_schema() -> None:
    pool = upstream_pool()
    packet = pool.FindMessageTypeByName("perfetto.protos.TracePacket").fields_by_name
    event = pool.FindMessageTypeByName("perfetto.protos.TrackEvent").fields_by_name
    expected = {
        "_P_PROCESS_TREE": packet["process_tree"], "_P_CLOCK_SNAPSHOT": packet["clock_snapshot"],
        "_P_TIMESTAMP": packet["timestamp"],
        "_P_SEQUENCE_ID": packet["trusted_packet_sequence_id"],
        "_P_TRACK_EVENT": packet["track_event"], "_P_INTERNED_DATA": packet["interned_data"],
        "_P_SEQUENCE_FLAGS": packet["sequence_flags"], "_P_TRACE_STATS": packet["trace_stats"],
        "_P_INCREMENTAL_STATE_CLEARED": packet["incremental_state_cleared"],
        "_P_PREVIOUS_PACKET_DROPPED": packet["previous_packet_dropped"],
        "_P_PROCESS_DESCRIPTOR": packet["process_descriptor"],
        "_P_THREAD_DESCRIPTOR": packet["thread_descriptor"],
        "_P_TIMESTAMP_CLOCK_ID": packet["timestamp_clock_id"],
        "_P_DEFAULTS": packet["trace_packet_defaults"],
        "_P_TRACK_DESCRIPTOR": packet["track_descriptor"],
        "_TE_CATEGORY_IIDS": event["category_iids"], "_TE_TYPE": event["type"],
        "_TE_NAME_IID": event["name_iid"], "_TE_TRACK_UUID": event["track_uuid"],
        "_TE_CATEGORIES": event["categories"], "_TE_NAME": event["name"],
        "_TE_COUNTER_VALUE": event["counter_value"],
        "_TE_DOUBLE_COUNTER_VALUE": event["double_counter_value"],
    }  # fmt: skip
    for constant, field in expected.items():
        assert getattr(_summary, constant) == field.number, constant
