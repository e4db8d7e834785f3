"""Hostile input to linux.ftrace: each a counted error, never a crash."""

from __future__ import annotations

import random
import struct
from itertools import accumulate

import pytest
from ftrace_testlib import SCHED_EVENTS, PingPong, ftrace_config, read_packet, record, switches
from perfetto_probes.ftrace import _ftrace_data_source
from perfetto_probes.ftrace import _page_parser as parser
from perfetto_probes.ftrace._formats import (
    FormatError,
    FormatField,
    event_layout,
    page_layout,
    parse_format,
)
from perfetto_probes.ftrace._tracefs import configured_cpus
from perfetto_protos.trace.ftrace.ftrace_event_bundle_pb2 import FtraceParseStatus

STATUS_OK = FtraceParseStatus.FTRACE_STATUS_OK

HEADER_PAGE = """\
\tfield: u64 timestamp;\toffset:0;\tsize:8;\tsigned:0;
\tfield: local_t commit;\toffset:8;\tsize:8;\tsigned:1;
\tfield: int overwrite;\toffset:8;\tsize:1;\tsigned:1;
\tfield: char data;\toffset:16;\tsize:4080;\tsigned:0;
"""
HEADER_EVENT = """\
# compressed entry header
\ttype_len    :    5 bits
\ttime_delta  :   27 bits
\tarray       :   32 bits

\tpadding     : type == 29
\ttime_extend : type == 30
\ttime_stamp : type == 31
\tdata max type_len  == 28
"""
COMMON = """\
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;
"""
RENAME = f"""name: task_rename
ID: 7
format:
{COMMON}
\tfield:pid_t pid;\toffset:8;\tsize:4;\tsigned:1;
\tfield:char oldcomm[16];\toffset:12;\tsize:16;\tsigned:0;
\tfield:char newcomm[16];\toffset:28;\tsize:16;\tsigned:0;
\tfield:short oom_score_adj;\toffset:44;\tsize:2;\tsigned:1;
"""


WAKING = f"""name: sched_waking
ID: 8
format:
{COMMON}
\tfield:char comm[16];\toffset:8;\tsize:16;\tsigned:0;
\tfield:pid_t pid;\toffset:24;\tsize:4;\tsigned:1;
\tfield:int prio;\toffset:28;\tsize:4;\tsigned:1;
\tfield:int target_cpu;\toffset:32;\tsize:4;\tsigned:1;
"""


def _writer() -> parser.BundleWriter:
    event_id, fields = parse_format(RENAME)
    page = page_layout(HEADER_PAGE, HEADER_EVENT, fields)
    return parser.BundleWriter(
        0, page, {event_id: event_layout("task", "task_rename", fields)}, False
    )


def _waking_writer() -> parser.BundleWriter:
    event_id, fields = parse_format(WAKING)
    page = page_layout(HEADER_PAGE, HEADER_EVENT, fields)
    return parser.BundleWriter(
        0, page, {event_id: event_layout("sched", "sched_waking", fields)}, True
    )


def _waking_record(pid: int, comm: bytes) -> bytes:
    data = struct.pack("<HBBi16siii", 8, 0, 0, pid, comm, pid, 120, 0)
    return struct.pack("<I", (1 << 5) | (len(data) // 4)) + data


def _rename_record(pid: int, old: bytes, new: bytes, delta: int = 10) -> bytes:
    data = struct.pack("<HBBii16s16sh2x", 7, 0, 0, pid, pid, old, new, -5)
    return struct.pack("<I", (delta << 5) | (len(data) // 4)) + data


def _page(records: bytes, commit: int | None = None, ts: int = 1000) -> bytes:
    size = len(records) if commit is None else commit
    return (struct.pack("<QQ", ts, size) + records).ljust(4096, b"\0")


def _bundle(writer: parser.BundleWriter) -> object:
    [packet] = writer.take_packets()
    return read_packet(packet).ftrace_events


def test_a_well_formed_page_gives_typed_events() -> None:
    writer = _writer()
    assert writer.parse_page(_page(_rename_record(42, b"old", b"new"))) == STATUS_OK
    bundle = _bundle(writer)
    [event] = bundle.event  # type: ignore[attr-defined]
    assert (event.timestamp, event.pid) == (1010, 42)
    rename = event.task_rename
    assert (rename.pid, rename.oldcomm, rename.newcomm, rename.oom_score_adj) == (
        42,
        "old",
        "new",
        -5,
    )


def test_the_writer_gives_each_pid_seen_since_it_last_gave_them() -> None:
    writer = _writer()
    pids = (1, 257, 1, 0, 513, -1)  # 1, 257 and 513 share their low 8 bits; -1 is read unsigned
    writer.parse_page(_page(b"".join(_rename_record(p, b"a", b"b") for p in pids)))
    assert writer.take_seen_pids() == {0, 1, 257, 513, 0xFFFFFFFF}
    assert writer.take_seen_pids() == set()
    writer.parse_page(_page(_rename_record(257, b"a", b"b")))
    assert writer.take_seen_pids() == {257}


def test_compact_sched_gives_each_event_its_comm_across_bundles() -> None:
    writer = _waking_writer()
    # 150 comms (more than the compiled build remembers), 16 bytes long or shorter.
    comms = [(b"%d-" % (i % 150)) * (1 + i % 7) for i in range(70 * 50)]
    comms = [c[:16] for c in comms]
    for first in range(0, len(comms), 50):  # 70 pages: more than one bundle's
        records = b"".join(_waking_record(i, comms[i]) for i in range(first, first + 50))
        assert writer.parse_page(_page(records, ts=1000 + first)) == STATUS_OK
    packets = [read_packet(p).ftrace_events.compact_sched for p in writer.take_packets()]
    assert len(packets) == 2
    written = []
    for sched in packets:
        assert len(set(sched.intern_table)) == len(sched.intern_table)
        written += [sched.intern_table[i].encode() for i in sched.waking_comm_index]
    assert written == comms


def test_compact_sched_keeps_a_timestamp_earlier_than_the_one_before() -> None:
    writer = _waking_writer()
    for ts in (5000, 1000):
        assert writer.parse_page(_page(_waking_record(1, b"a"), ts=ts)) == STATUS_OK
    [packet] = writer.take_packets()
    deltas = read_packet(packet).ftrace_events.compact_sched.waking_timestamp
    assert list(accumulate(deltas, lambda a, b: (a + b) % 2**64)) == [5001, 1001]


def test_a_page_with_a_bad_commit_size_is_a_counted_error() -> None:
    writer = _writer()
    status = writer.parse_page(_page(_rename_record(42, b"a", b"b"), commit=5000))
    assert status == FtraceParseStatus.FTRACE_STATUS_ABI_INVALID_PAGE_HEADER
    assert writer.parse_page(_page(_rename_record(43, b"a", b"b"))) == STATUS_OK
    bundle = _bundle(writer)
    assert [e.pid for e in bundle.event] == [43]  # type: ignore[attr-defined]
    assert [(e.timestamp, e.status) for e in bundle.error] == [(1000, status)]  # type: ignore[attr-defined]
    assert writer.parse_errors == {status}


def test_a_truncated_event_keeps_the_events_before_it() -> None:
    writer = _writer()
    records = _rename_record(1, b"a", b"b") + _rename_record(2, b"c", b"d")
    status = writer.parse_page(_page(records[:-8]))
    assert status == FtraceParseStatus.FTRACE_STATUS_ABI_END_OVERFLOW
    bundle = _bundle(writer)
    assert [e.pid for e in bundle.event] == [1]  # type: ignore[attr-defined]
    assert [e.status for e in bundle.error] == [status]  # type: ignore[attr-defined]


def test_a_record_shorter_than_its_format_is_an_invalid_event() -> None:
    writer = _writer()
    short = struct.pack("<I", (10 << 5) | 2) + struct.pack("<HBBi", 7, 0, 0, 9)
    assert writer.parse_page(_page(short)) == FtraceParseStatus.FTRACE_STATUS_INVALID_EVENT


def test_the_missed_events_flag_starts_a_bundle_with_lost_events() -> None:
    writer = _writer()
    record_ = _rename_record(1, b"a", b"b")
    writer.parse_page(_page(record_))
    writer.parse_page(_page(record_, commit=len(record_) | (1 << 31), ts=2000))
    first, second = (read_packet(p).ftrace_events for p in writer.take_packets())
    assert not first.lost_events
    assert second.lost_events
    assert second.previous_bundle_end_timestamp == 1010


def test_time_extend_and_absolute_timestamps_are_applied() -> None:
    writer = _writer()
    extend = struct.pack("<II", (5 << 5) | 30, 1)  # + 5 + (1 << 27)
    stamp = struct.pack("<II", (7 << 5) | 31, 2)  # = 7 + (2 << 27)
    records = extend + _rename_record(1, b"a", b"b", 0) + stamp + _rename_record(2, b"a", b"b", 0)
    assert writer.parse_page(_page(records)) == STATUS_OK
    bundle = _bundle(writer)
    assert [e.timestamp for e in bundle.event] == [1005 + (1 << 27), 7 + (2 << 27)]  # type: ignore[attr-defined]


def test_a_format_with_an_unknown_field_type_is_refused() -> None:
    text = RENAME.replace(
        "field:short oom_score_adj;\toffset:44;\tsize:2;",
        "field:struct odd x;\toffset:44;\tsize:3;",
    )
    with pytest.raises(FormatError, match="'x' of type 'struct odd' has size 3"):
        parse_format(text)


def test_an_event_whose_format_is_refused_is_reported_failed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refusing(text: str) -> tuple[int, list[FormatField]]:
        if "name: sched_waking" in text:
            raise FormatError("field 'x' of type 'struct odd' has size 3")
        return parse_format(text)

    monkeypatch.setattr(f"{_ftrace_data_source.__name__}.parse_format", refusing)
    packets = record(ftrace_config(ftrace_events=SCHED_EVENTS), PingPong(10).run)
    stats = [p.ftrace_stats for p in packets if p.HasField("ftrace_stats")]
    assert [list(s.failed_ftrace_events) for s in stats] == [["sched/sched_waking"]] * 2
    assert list(switches(packets))


def test_a_cpu_without_a_per_cpu_directory_is_a_counted_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cpus = configured_cpus()
    monkeypatch.setattr(_ftrace_data_source, "configured_cpus", lambda: cpus + 1)
    packets = record(ftrace_config(ftrace_events=SCHED_EVENTS), PingPong(10).run)
    end = [p.ftrace_stats for p in packets if p.HasField("ftrace_stats")][-1]
    assert FtraceParseStatus.FTRACE_STATUS_UNEXPECTED_READ_ERROR in end.ftrace_parse_errors
    assert {c.cpu for c in end.cpu_stats} == set(range(cpus))
    assert list(switches(packets))


def test_pages_of_random_bytes_never_raise() -> None:
    writer = _writer()
    rng = random.Random(28)
    for _ in range(300):
        page = bytearray(rng.randbytes(4096))
        page[8:12] = struct.pack("<I", rng.randrange(0, 4200))
        writer.parse_page(bytes(page))
    for packet in writer.take_packets():
        read_packet(packet)
