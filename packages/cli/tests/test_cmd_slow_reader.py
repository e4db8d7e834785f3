"""`perfetto -o /dev/stdout | slow reader` against a real traced: readers of any speed get the
whole trace; a reader that stops longer than traced's consumer timeout is cut off and told."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from cmdlib import BIN, Producer, Traced, test_values
from perfetto_protos.config.trace_config_pb2 import TraceConfig
from perfetto_testing import TIMEOUT, read_upstream_trace

SLOW_READER_MAIN = str(Path(__file__).with_name("slow_reader_main.py"))
CONSUMER_TIMEOUT_S = 4.0  # a loaded machine's pause in any of the three processes is shorter
PACKETS = 4000
PAYLOAD = 2000  # 4000 packets of ~2 KB: ~8 MB, 8 s at 1 MB/s, twice the consumer timeout
READER_RATE = 1024 * 1024


@pytest.fixture
def slow_traced(tmp_path: Path) -> Iterator[Traced]:
    with Traced(tmp_path, "--consumer-timeout", str(CONSUMER_TIMEOUT_S)) as daemon:
        yield daemon


def _pipeline(traced: Traced, directory: Path, *reader_args: str) -> tuple[int, str, Path]:
    """Traces PACKETS packets with `perfetto -o /dev/stdout | slow_reader_main.py OUT ...`
    (stopped by SIGINT once written); the command's exit status, its stderr, and OUT."""
    config = TraceConfig(duration_ms=600_000)
    config.buffers.add(size_kb=32 * 1024)
    config.data_sources.add().config.name = "test.ds"
    (directory / "config.pb").write_bytes(config.SerializeToString())
    out = directory / "read.pftrace"
    producer = Producer(traced, count=PACKETS, payload=PAYLOAD)
    try:
        command = subprocess.Popen(
            [str(BIN / "perfetto"), "-c", str(directory / "config.pb"), "-o", "/dev/stdout"],
            env=traced.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            assert command.stdout is not None
            reader = subprocess.Popen(
                [sys.executable, SLOW_READER_MAIN, str(out), *reader_args], stdin=command.stdout
            )
            command.stdout.close()
            try:
                producer.wait_for("WROTE")
                command.send_signal(signal.SIGINT)
                assert command.stderr is not None
                stderr = command.stderr.read().decode()
                command.wait(TIMEOUT)
                reader.wait(TIMEOUT)
            finally:
                if reader.poll() is None:
                    reader.kill()
                    reader.wait()
        finally:
            if command.poll() is None:
                command.kill()
                command.wait()
            if command.stderr is not None:
                command.stderr.close()
    finally:
        producer.stop()
    return command.returncode, stderr, out


def test_a_slow_reader_that_keeps_reading_gets_every_packet(
    slow_traced: Traced, tmp_path: Path
) -> None:
    status, stderr, out = _pipeline(slow_traced, tmp_path, str(READER_RATE))
    assert status == 0, stderr
    size = out.stat().st_size
    assert size > 1.5 * CONSUMER_TIMEOUT_S * READER_RATE  # longer to read than the timeout
    assert f"Wrote {size} bytes into /dev/stdout" in stderr
    assert test_values(read_upstream_trace(out)) == list(range(PACKETS))


def test_a_reader_that_stops_longer_than_the_timeout_is_cut_off_and_told(
    slow_traced: Traced, tmp_path: Path
) -> None:
    pause_s = CONSUMER_TIMEOUT_S + 3
    status, stderr, out = _pipeline(
        slow_traced, tmp_path, str(READER_RATE * 100), str(1024 * 1024), str(pause_s)
    )
    assert status == 1, stderr
    lines = [line for line in stderr.splitlines() if "incomplete" in line]
    assert len(lines) == 1, stderr
    assert "Disconnected from the traced service: the trace is incomplete" in lines[0]
    assert "Wrote" not in stderr
    assert len(test_values(read_upstream_trace(out))) < PACKETS
