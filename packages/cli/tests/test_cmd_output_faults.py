"""The trace's output failing under a real traced: a full disk (a real tmpfs) and a FIFO nobody
reads. The trace is never called complete, holds whole packets only, and traced keeps serving."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cmdlib import BIN, Producer, Traced, start_perfetto, test_values
from perfetto_protos.config.trace_config_pb2 import TraceConfig
from perfetto_testing import TIMEOUT, read_upstream_trace
from protozero import read_varint

TIMEOUT_FLAG_S = 2.0
PATIENT_TIMEOUT_S = 600.0  # a stuck FIFO outlasts any step of a test, however loaded the machine
ANSWER_TIMEOUT_S = 60.0  # a python command's start-up under load; traced answers at once
PACKETS = 1500
PAYLOAD = 1000  # ~1.5 MB of packets: more than the 1 MB file system and a pipe's 64 KB


@pytest.fixture
def fault_traced(tmp_path: Path) -> Iterator[Traced]:
    with Traced(tmp_path, "--consumer-timeout", str(TIMEOUT_FLAG_S)) as daemon:
        yield daemon


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MB tmpfs mounted for the test."""
    mount_point = tmp_path / "small"
    mount_point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount_point)],
        capture_output=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def _config(directory: Path, **fields: object) -> str:
    config = TraceConfig(duration_ms=600_000, **fields)  # type: ignore[arg-type]
    config.buffers.add(size_kb=8 * 1024)
    config.data_sources.add().config.name = "test.ds"
    path = directory / "config.pb"
    path.write_bytes(config.SerializeToString())
    return str(path)


def _whole_packets_only(data: bytes) -> int:
    """How many `Trace.packet` fields `data` holds; fails unless it ends on a whole one."""
    pos = count = 0
    while pos < len(data):
        assert data[pos] == 0x0A, f"not a Trace.packet field at {pos}"
        length, cursor = read_varint(data, pos + 1, len(data))
        assert cursor > 0, f"truncated packet header at {pos}"
        assert cursor + length <= len(data), f"truncated last packet at {pos}"
        pos = cursor + length
        count += 1
    return count


def _run_until_written(traced: Traced, *args: str) -> subprocess.CompletedProcess[bytes]:
    """Runs `perfetto args...` with a producer writing PACKETS packets; SIGINT once written."""
    producer = Producer(traced, count=PACKETS, payload=PAYLOAD)
    try:
        command = start_perfetto(traced, *args)
        try:
            producer.wait_for("WROTE")
            command.send_signal(2)
            stdout, stderr = command.communicate(timeout=TIMEOUT)
        finally:
            if command.poll() is None:
                command.kill()
                command.communicate()
    finally:
        producer.stop()
    return subprocess.CompletedProcess(command.args, command.returncode, stdout, stderr)


def test_write_into_file_onto_a_full_disk_fails_naming_the_cause(
    fault_traced: Traced, tmp_path: Path, full_disk: Path
) -> None:
    out = full_disk / "trace"
    config = _config(tmp_path, write_into_file=True, file_write_period_ms=100)
    result = _run_until_written(fault_traced, "-c", config, "-o", str(out))
    stderr = result.stderr.decode()
    assert result.returncode == 1, stderr
    assert f"Service error: Failed to write the trace file {out}: No space left on device" in (
        stderr
    )
    assert "Trace written into the output file" not in stderr
    log = fault_traced.stopped_log()
    assert log.count("No space left on device") == 1, log
    data = out.read_bytes()
    assert _whole_packets_only(data) > 0
    values = test_values(read_upstream_trace(out))
    assert 0 < len(values) < PACKETS
    assert values == list(range(len(values)))


def test_perfetto_out_onto_a_full_disk_fails_with_one_line(
    fault_traced: Traced, tmp_path: Path, full_disk: Path
) -> None:
    out = full_disk / "trace"
    result = _run_until_written(fault_traced, "-c", _config(tmp_path), "-o", str(out))
    stderr = result.stderr.decode()
    assert result.returncode == 1, stderr
    failures = [line for line in stderr.splitlines() if "No space left on device" in line]
    assert len(failures) == 1, stderr
    assert f"Failed to write packets into {out}: No space left on device" in failures[0]
    assert "Wrote" not in stderr
    _whole_packets_only(out.read_bytes())
    values = test_values(read_upstream_trace(out))
    assert 0 < len(values) < PACKETS


@pytest.fixture
def impatient_traced(tmp_path: Path) -> Iterator[Traced]:
    """traced giving a stuck FIFO's reader TIMEOUT_FLAG_S."""
    with Traced(tmp_path, "--consumer-timeout", str(TIMEOUT_FLAG_S)) as daemon:
        yield daemon


@pytest.fixture
def patient_traced(tmp_path: Path) -> Iterator[Traced]:
    """traced giving a stuck FIFO's reader longer than any step of a test under load."""
    with Traced(tmp_path, "--consumer-timeout", str(PATIENT_TIMEOUT_S)) as daemon:
        yield daemon


def test_write_into_file_into_a_fifo_nobody_reads_fails_after_the_timeout(
    impatient_traced: Traced, tmp_path: Path
) -> None:
    traced = impatient_traced
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    config = _config(tmp_path, write_into_file=True, file_write_period_ms=100)
    producer = Producer(traced, count=PACKETS, payload=PAYLOAD)
    try:
        command = start_perfetto(traced, "-c", config, "-o", str(fifo))
    except BaseException:
        producer.stop()
        raise
    try:
        producer.wait_for("WROTE")
        _, stderr = command.communicate(timeout=TIMEOUT)
        late_producer = Producer(traced, "other.ds")  # traced serves on after the failure
        late_producer.stop()
    finally:
        if command.poll() is None:
            command.kill()
            command.communicate()
        producer.stop()
    log = traced.stopped_log()
    text = stderr.decode()
    assert command.returncode == 1, text
    error = (
        f"Failed to write the trace file {fifo}: its reader took nothing for {TIMEOUT_FLAG_S:g} s"
    )
    assert f"Service error: {error}" in text
    assert "Trace written into the output file" not in text
    assert log.count(error) == 1, log


def test_write_into_file_into_a_fifo_read_late_gets_the_whole_trace(
    patient_traced: Traced, tmp_path: Path
) -> None:
    traced = patient_traced
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    config = _config(tmp_path, write_into_file=True, file_write_period_ms=100)
    copy = tmp_path / "copy.pftrace"
    producer = Producer(traced, count=PACKETS, payload=PAYLOAD)
    try:
        command = start_perfetto(traced, "-c", config, "-o", str(fifo))
    except BaseException:
        producer.stop()
        raise
    reader: subprocess.Popen[bytes] | None = None
    try:
        producer.wait_for("WROTE")
        time.sleep(0.5)  # traced's drains found the FIFO full
        # traced answers meanwhile (it used to block in write() until the FIFO was read).
        query = subprocess.run(
            [str(BIN / "perfetto"), "--query"],
            env=traced.env,
            capture_output=True,
            timeout=ANSWER_TIMEOUT_S,
            check=False,
        )
        assert query.returncode == 0, query.stderr
        assert b"Tracing sessions: 1 (started: 1)" in query.stdout
        late_producer = Producer(traced, "other.ds")
        late_producer.stop()
        command.send_signal(2)
        time.sleep(1.0)  # the session waits for the FIFO's reader
        with open(copy, "wb") as sink:
            reader = subprocess.Popen(["cat", str(fifo)], stdout=sink)
        _, stderr = command.communicate(timeout=TIMEOUT)
    finally:
        if command.poll() is None:
            command.kill()
            command.communicate()
        producer.stop()
        if reader is not None:  # perfetto holds the FIFO open too: cat ends once it exits
            try:
                reader.wait(TIMEOUT)
            except subprocess.TimeoutExpired:
                reader.kill()
                reader.wait()
    text = stderr.decode()
    assert command.returncode == 0, text
    assert "Trace written into the output file" in text
    assert test_values(read_upstream_trace(copy)) == list(range(PACKETS))
