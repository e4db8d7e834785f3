"""`perfetto --summary` and `perfetto-trace report` on the same traces, as a user types them:
a million distinct names (output, memory and time bounded) and a corrupt packet (one verdict).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from perfetto_testing import SLOW_TIMEOUT
from protozero import encode_varint

BIN = Path(sys.executable).parent
NAMES = 1_000_000
MAX_OUTPUT = 64 << 10  # bytes a summary of 20 rows per table takes, with room to spare
# Before #30, --summary printed 94 MB, peaked at 779 MiB and took 15 s of CPU; about 300
# bytes a name are left (350 MiB), in either command and build.
MAX_PEAK_RSS = 480 << 20
MAX_CPU_SECONDS = 60  # generous: 9 s (--summary), 2.5 s (report; 15 s pure) here


def _field(number: int, payload: bytes) -> bytes:
    return encode_varint(number << 3 | 2) + encode_varint(len(payload)) + payload


def _varint_field(number: int, value: int) -> bytes:
    return encode_varint(number << 3) + encode_varint(value)


def _packet(body: bytes) -> bytes:
    return _field(1, body)  # Trace.packet


_SEQUENCE = _varint_field(10, 1)  # trusted_packet_sequence_id


def _many_names_trace(path: Path) -> None:
    """One slice (1 ns, on one track) per distinct interned name, names interned 1000 a packet."""
    begin_head = _varint_field(8, 1) + _SEQUENCE  # timestamp 1
    end = _packet(_varint_field(8, 2) + _SEQUENCE + _field(11, _varint_field(9, 2)))
    with path.open("wb") as out:
        out.write(_packet(_varint_field(8, 0) + _SEQUENCE + _varint_field(13, 1)))
        for first in range(1, NAMES + 1, 1000):
            iids = [encode_varint(iid) for iid in range(first, min(first + 1000, NAMES + 1))]
            names = b"".join(
                _field(2, b"\x08" + iid + _field(2, b"function_" + iid.hex().encode()))
                for iid in iids
            )
            parts = [_packet(_SEQUENCE + _field(12, names))]  # interned_data { event_names }
            for iid in iids:  # track_event { type: SLICE_BEGIN, name_iid }, then its end
                parts.append(_packet(begin_head + _field(11, b"\x48\x01\x50" + iid)))
                parts.append(end)
            out.write(b"".join(parts))


# Runs the command in a child of its own and writes "status maxrss_kb cpu_seconds" to argv[1].
# A process's peak RSS starts at its parent's at fork (Linux carries it over exec), and a
# pytest worker that ran other tests may be far larger than the command: this small launcher,
# not the worker, is the command's parent.
_MEASURE = """
import os, sys
report, argv = sys.argv[1], sys.argv[2:]
pid = os.fork()
if pid == 0:
    try:
        os.execvp(argv[0], argv)
    finally:
        os._exit(127)
_, status, usage = os.wait4(pid, 0)
cpu = usage.ru_utime + usage.ru_stime
with open(report, "w") as out:
    out.write(f"{os.waitstatus_to_exitcode(status)} {usage.ru_maxrss} {cpu}")
"""


def _run(argv: list[str], cwd: Path) -> tuple[int, bytes, bytes, int, float]:
    """(exit status, stdout, stderr, peak RSS in bytes, CPU seconds) of the command `argv`."""
    out_path = cwd / "stdout"
    err_path = cwd / "stderr"
    report = cwd / "usage"
    with out_path.open("wb") as out, err_path.open("wb") as err:
        process = subprocess.Popen(
            [sys.executable, "-c", _MEASURE, str(report), *argv],
            cwd=cwd,
            stdout=out,
            stderr=err,
            start_new_session=True,
        )
        try:
            process.wait(SLOW_TIMEOUT)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)  # none left, unless the wait failed
    assert process.returncode == 0, err_path.read_text()
    status, maxrss_kb, cpu = report.read_text().split()
    return (
        int(status),
        out_path.read_bytes(),
        err_path.read_bytes(),
        int(maxrss_kb) * 1024,
        float(cpu),
    )


def test_the_peak_rss_is_the_commands_own_not_the_test_processs(tmp_path: Path) -> None:
    # a child's peak RSS starts at its parent's: this process holding 300 MiB must not make a
    # command of a few MiB measure as large
    held = bytearray(300 << 20)
    held[::4096] = b"\x01" * len(held[::4096])
    status, _, _, peak, _ = _run(["true"], tmp_path)
    assert status == 0
    assert peak < 100 << 20, peak >> 20
    del held


@pytest.fixture(scope="module")
def many_names(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("names") / "names.pftrace"
    _many_names_trace(path)
    return path


@pytest.mark.parametrize(
    ("command", "rows"),
    [
        (["perfetto", "--summary"], "more slice names"),
        (["perfetto-trace", "report"], "more functions"),
    ],
    ids=["summary", "report"],
)
def test_a_million_names_prints_the_top_rows_in_bounded_memory_and_time(
    many_names: Path, tmp_path: Path, command: list[str], rows: str
) -> None:
    status, out, err, peak, cpu = _run(
        [str(BIN / command[0]), *command[1:], str(many_names)], tmp_path
    )
    assert status == 0, err
    text = out.decode()
    assert len(out) < MAX_OUTPUT, text[:2000]
    assert f"{NAMES - 20:,} {rows}" in text, text
    assert peak < MAX_PEAK_RSS, f"peak RSS {peak >> 20} MiB"
    assert cpu < MAX_CPU_SECONDS, f"{cpu:.1f} s of CPU"


def _corrupt_trace(path: Path, track_event: bytes) -> int:
    """Writes a good packet and one holding `track_event`; returns the latter's offset."""
    good = _packet(_varint_field(8, 5) + _SEQUENCE + _field(11, _varint_field(9, 3)))
    path.write_bytes(good + _packet(_varint_field(8, 6) + _SEQUENCE + track_event))
    return len(good)


@pytest.mark.parametrize(
    ("track_event", "why"),
    [
        # track_event claims 2**40 bytes: more than its packet holds.
        (encode_varint(11 << 3 | 2) + encode_varint(1 << 40) + b"\x48\x01", "a field runs"),
        # a field inside track_event claims 2**40 bytes.
        (
            _field(11, encode_varint(22 << 3 | 2) + encode_varint(1 << 40) + b"x"),
            "a field of its track_event runs",
        ),
    ],
    ids=["track_event", "inside-track_event"],
)
def test_a_corrupt_packet_is_the_same_one_line_verdict_in_both(
    tmp_path: Path, track_event: bytes, why: str
) -> None:
    offset = _corrupt_trace(tmp_path / "bad.pftrace", track_event)
    verdicts = []
    for command, prefix in (
        (["perfetto", "--summary"], "perfetto: "),
        (["perfetto-trace", "report"], "perfetto-trace: "),
    ):
        result = subprocess.run(
            [str(BIN / command[0]), *command[1:], "bad.pftrace"],
            cwd=tmp_path,
            capture_output=True,
            timeout=SLOW_TIMEOUT,
            check=False,
        )
        assert result.returncode == 1, result
        assert result.stdout == b""
        stderr = result.stderr.decode()
        assert stderr.startswith(prefix), stderr
        verdicts.append(stderr.removeprefix(prefix))
    expected = f"bad.pftrace is corrupt: the packet at offset {offset}: {why} past its end\n"
    assert verdicts == [expected, expected]
