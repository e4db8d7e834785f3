"""Normal mode against a real traced: configs in, trace files out, upstream's lines and codes."""

from __future__ import annotations

import os
import pty
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cmdlib import BIN, Producer, Traced, packet_kinds, perfetto, start_perfetto, test_values
from google.protobuf import text_format
from perfetto_protos.config.trace_config_pb2 import TraceConfig
from perfetto_protos.upstream import upstream_message_class
from perfetto_testing import read_upstream_trace

TEXT_CONFIG = """
# what a user writes: comments, enums by name, a data source we do not model
buffers { size_kb: 1024 fill_policy: RING_BUFFER }
data_sources { config { name: "test.ds" target_buffer: 0 } }
data_sources {
  config {
    name: "linux.ftrace"
    ftrace_config { ftrace_events: "sched/sched_switch" buffer_size_kb: 4096 }
  }
}
duration_ms: 500
"""


def _binary_config(duration_ms: int = 500, **fields: object) -> bytes:
    config = TraceConfig(duration_ms=duration_ms, **fields)  # type: ignore[arg-type]
    config.buffers.add(size_kb=1024)
    config.data_sources.add().config.name = "test.ds"
    return config.SerializeToString()


def test_binary_config_file_writes_a_trace_with_the_producers_packets(
    traced: Traced, producer: Callable[..., Producer], tmp_path: Path
) -> None:
    producer(count=25)
    (tmp_path / "config.pb").write_bytes(_binary_config())
    out = tmp_path / "trace.pftrace"
    result = perfetto(traced, "-c", str(tmp_path / "config.pb"), "-o", str(out))
    assert result.returncode == 0, result.stderr
    stderr = result.stderr.decode()
    assert "Connected to the Perfetto traced service, TTL: 1s" in stderr
    assert f"Wrote {out.stat().st_size} bytes into {out}" in stderr
    trace = read_upstream_trace(out)
    assert test_values(trace) == list(range(25))
    assert packet_kinds(trace)["trace_config"] == 1


def test_text_config_from_stdin_to_stdout(
    traced: Traced, producer: Callable[..., Producer]
) -> None:
    producer(count=7)
    result = perfetto(traced, "-c", "-", "--txt", "-o", "-", input=TEXT_CONFIG.encode())
    assert result.returncode == 0, result.stderr
    assert f"Wrote {len(result.stdout)} bytes into stdout" in result.stderr.decode()
    trace = upstream_message_class("perfetto.protos.Trace")()
    trace.ParseFromString(result.stdout)
    assert test_values(trace) == list(range(7))


def test_data_source_configs_we_do_not_model_reach_the_producer_as_upstream_encodes_them(
    traced: Traced, producer: Callable[..., Producer], tmp_path: Path
) -> None:
    text = """
    buffers { size_kb: 256 }
    data_sources {
      config {
        name: "linux.ftrace"
        ftrace_config {
          buffer_size_kb: 8192 drain_period_ms: 500
          ftrace_events: "sched/sched_switch" ftrace_events: "power/cpu_idle"
          atrace_categories: "gfx" atrace_apps: "com.example" symbolize_ksyms: true
        }
        gpu_counter_config { counter_period_ns : 1000000 counter_ids: 3 counter_ids: 1 }
        android_log_config { log_ids: LID_DEFAULT log_ids: LID_CRASH }
        heapprofd_config {
          sampling_interval_bytes: 1 process_cmdline: "adbd"
          continuous_dump_config { dump_phase_ms: 10000 dump_interval_ms: 1000 }
        }
      }
    }
    duration_ms: 300
    """
    ftrace = producer("linux.ftrace", count=1)
    (tmp_path / "config.txt").write_text(text)
    result = perfetto(
        traced, "--txt", "-c", str(tmp_path / "config.txt"), "-o", str(tmp_path / "t")
    )
    assert result.returncode == 0, result.stderr
    received = bytes.fromhex(ftrace.wait_for("CONFIG").split()[1])
    ds_class = upstream_message_class("perfetto.protos.DataSourceConfig")
    got: Any = ds_class.FromString(received)
    expected: Any = upstream_message_class("perfetto.protos.TraceConfig")()
    text_format.Parse(text, expected)
    want = expected.data_sources[0].config
    for name in ("ftrace_config", "gpu_counter_config", "android_log_config", "heapprofd_config"):
        assert getattr(got, name).SerializeToString() == getattr(want, name).SerializeToString()
    assert list(got.ftrace_config.ftrace_events) == ["sched/sched_switch", "power/cpu_idle"]


def test_text_config_errors_name_file_line_and_column(traced: Traced, tmp_path: Path) -> None:
    path = tmp_path / "bad.cfg"
    path.write_text("buffers { size_kb: 10 }\nduration_msec: 5\n")
    result = perfetto(traced, "--txt", "-c", str(path), "-o", str(tmp_path / "t"))
    assert result.returncode == 1
    lines = result.stderr.decode().splitlines()
    assert len(lines) == 1
    assert str(path) in lines[0]
    assert "2:1" in lines[0]
    assert "duration_msec" in lines[0]
    assert "Traceback" not in result.stderr.decode()


def test_txt_lossy_drops_unknown_fields(
    traced: Traced, producer: Callable[..., Producer], tmp_path: Path
) -> None:
    producer(count=3)
    text = TEXT_CONFIG + "\nfield_from_the_future: 3\n"
    result = perfetto(traced, "--txt-lossy", "-c", "-", "-o", "-", input=text.encode())
    assert result.returncode == 0, result.stderr
    trace = upstream_message_class("perfetto.protos.Trace")()
    trace.ParseFromString(result.stdout)
    assert test_values(trace) == [0, 1, 2]


def test_text_given_as_binary_gets_upstreams_hint(traced: Traced, tmp_path: Path) -> None:
    result = perfetto(traced, "-c", "-", "-o", str(tmp_path / "t"), input=b"duration_ms: 1\n")
    assert result.returncode == 1
    assert "Try adding --txt to the cmdline." in result.stderr.decode()


def test_add_attribute_lands_in_the_trace_config(
    traced: Traced, producer: Callable[..., Producer], tmp_path: Path
) -> None:
    producer(count=1)
    out = tmp_path / "t"
    result = perfetto(
        traced, "--txt", "-c", "-", "-o", str(out),
        "--add-attribute", "build=a=b", "--add-attribute", "empty",
        input=TEXT_CONFIG.encode(),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    configs = [
        p.trace_config for p in read_upstream_trace(out).packet if p.HasField("trace_config")
    ]
    attributes = {a.key: a.string_value for a in configs[0].trace_attributes.attribute}
    assert attributes == {"build": "a=b", "empty": ""}
    bad = perfetto(traced, "--add-attribute", "=v", "-c", "-", "-o", str(out))
    assert bad.returncode == 1
    assert bad.stderr.decode().strip() == "perfetto: add-attribute: key must be non-empty"


def test_no_clobber_refuses_an_existing_file(traced: Traced, tmp_path: Path) -> None:
    out = tmp_path / "t"
    out.write_bytes(b"keep me")
    result = perfetto(
        traced, "--txt", "-c", "-", "-o", str(out), "--no-clobber", input=TEXT_CONFIG.encode()
    )
    assert result.returncode == 1
    assert "refusing to overwrite due to '--no-clobber'" in result.stderr.decode()
    assert out.read_bytes() == b"keep me"


def test_write_into_file_streams_into_the_output(
    traced: Traced, producer: Callable[..., Producer], tmp_path: Path
) -> None:
    producer(count=40)
    out = tmp_path / "t"
    config = _binary_config(duration_ms=700, write_into_file=True, file_write_period_ms=100)
    result = perfetto(traced, "-c", "-", "-o", str(out), input=config)
    assert result.returncode == 0, result.stderr
    assert "Trace written into the output file" in result.stderr.decode()
    assert test_values(read_upstream_trace(out)) == list(range(40))


def test_sigterm_mid_trace_stops_the_session_and_still_writes(
    traced: Traced, producer: Callable[..., Producer], tmp_path: Path
) -> None:
    test_producer = producer(count=12)
    out = tmp_path / "t"
    (tmp_path / "c").write_bytes(_binary_config(duration_ms=600_000))
    command = start_perfetto(traced, "-c", str(tmp_path / "c"), "-o", str(out))
    test_producer.wait_for("WROTE")
    command.send_signal(signal.SIGTERM)
    _, stderr = command.communicate(timeout=60)
    assert command.returncode == 0, stderr
    assert b"SIGINT/SIGTERM received: disabling tracing." in stderr
    assert test_values(read_upstream_trace(out)) == list(range(12))


def test_sigint_works_like_sigterm(
    traced: Traced, producer: Callable[..., Producer], tmp_path: Path
) -> None:
    test_producer = producer(count=3)
    out = tmp_path / "t"
    (tmp_path / "c").write_bytes(_binary_config(duration_ms=600_000))
    command = start_perfetto(traced, "-c", str(tmp_path / "c"), "-o", str(out))
    test_producer.wait_for("WROTE")
    command.send_signal(signal.SIGINT)
    command.communicate(timeout=60)
    assert command.returncode == 0
    assert test_values(read_upstream_trace(out)) == [0, 1, 2]


def test_sigint_after_sigint_as_the_command_ends_changes_nothing(
    traced: Traced, producer: Callable[..., Producer], tmp_path: Path
) -> None:
    """An impatient user: Ctrl-C held down from mid-trace until the command has exited."""
    test_producer = producer(count=3)
    out = tmp_path / "t"
    (tmp_path / "c").write_bytes(_binary_config(duration_ms=600_000))
    command = start_perfetto(traced, "-c", str(tmp_path / "c"), "-o", str(out))
    test_producer.wait_for("WROTE")
    signals = 0
    deadline = time.monotonic() + 60
    while command.poll() is None and time.monotonic() < deadline:
        command.send_signal(signal.SIGINT)
        signals += 1
        time.sleep(0.001)
    _, stderr = command.communicate(timeout=60)
    text = stderr.decode()
    assert command.returncode == 0, text
    assert signals > 1
    assert "Traceback" not in text
    assert text.count("SIGINT/SIGTERM received: disabling tracing.") == 1, text
    assert f"Wrote {out.stat().st_size} bytes into {out}" in text
    assert test_values(read_upstream_trace(out)) == [0, 1, 2]


def test_traced_missing_prints_the_hint(tmp_path: Path) -> None:
    missing = Traced.__new__(Traced)
    missing.env = dict(os.environ)
    missing.env["PERFETTO_CONSUMER_SOCK_NAME"] = str(tmp_path / "nobody-here")
    result = perfetto(
        missing, "--txt", "-c", "-", "-o", str(tmp_path / "t"), input=TEXT_CONFIG.encode()
    )
    assert result.returncode == 1
    stderr = result.stderr.decode()
    assert f"Could not connect to the traced socket {tmp_path / 'nobody-here'}" in stderr
    assert "Ensure traced is running" in stderr
    assert "Traceback" not in stderr


def test_unknown_data_source_gives_a_trace_without_its_data(traced: Traced, tmp_path: Path) -> None:
    out = tmp_path / "t"
    text = 'buffers { size_kb: 64 } data_sources { config { name: "no.such" } } duration_ms: 200'
    result = perfetto(traced, "--txt", "-c", "-", "-o", str(out), input=text.encode())
    assert result.returncode == 0, result.stderr
    kinds = packet_kinds(read_upstream_trace(out))
    assert kinds["trace_config"] == 1
    assert "for_testing" not in kinds


def test_a_config_the_service_rejects_is_a_service_error(traced: Traced, tmp_path: Path) -> None:
    out = tmp_path / "t"
    text = """
    buffers { size_kb: 64 }
    data_sources { config { name: "test.ds" } }
    trigger_config {
      trigger_mode: START_TRACING
      triggers { name: "foo" }
      trigger_timeout_ms: 900000000
    }
    """
    result = perfetto(traced, "--txt", "-c", "-", "-o", str(out), input=text.encode())
    assert result.returncode == 0  # upstream: service errors are soft (exit 0)
    assert "Service error:" in result.stderr.decode()
    assert not out.exists()


def test_progress_line_on_a_terminal(
    traced: Traced, producer: Callable[..., Producer], tmp_path: Path
) -> None:
    producer(count=5)
    (tmp_path / "c").write_bytes(_binary_config(duration_ms=1500))
    master, slave = pty.openpty()
    command = subprocess.Popen(
        [str(BIN / "perfetto"), "-c", str(tmp_path / "c"), "-o", str(tmp_path / "t")],
        env=traced.env,
        stderr=slave,
    )
    traced.commands.append(command)
    os.close(slave)
    seen = b""
    try:
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: the command exited and closed the terminal
                break
            if not chunk:
                break
            seen += chunk
    finally:
        os.close(master)
        command.wait(60)
    assert command.returncode == 0
    text = seen.decode(errors="replace")
    assert "\rTracing: " in text or "\r\x1b[KTracing: " in text
    assert "of 2s" in text
    assert "in the buffers" in text
    assert "Wrote " in text


def test_no_progress_line_when_stderr_is_not_a_terminal(
    traced: Traced, producer: Callable[..., Producer], tmp_path: Path
) -> None:
    producer(count=1)
    result = perfetto(traced, "-c", "-", "-o", str(tmp_path / "t"), input=_binary_config())
    assert b"Tracing: " not in result.stderr
    assert b"\r" not in result.stderr


def test_the_end_says_what_the_session_lost_as_its_trace_stats_count_it(
    traced: Traced, producer: Callable[..., Producer], tmp_path: Path
) -> None:
    producer(count=20_000)  # about 600 KB of packets into a 64 KiB ring buffer
    config = TraceConfig(duration_ms=1000)
    config.buffers.add(size_kb=64)
    config.data_sources.add().config.name = "test.ds"
    (tmp_path / "config.pb").write_bytes(config.SerializeToString())
    out = tmp_path / "trace.pftrace"
    result = perfetto(traced, "-c", str(tmp_path / "config.pb"), "-o", str(out))
    assert result.returncode == 0, result.stderr
    stats = [p.trace_stats for p in read_upstream_trace(out).packet if p.HasField("trace_stats")][
        -1
    ]
    overwritten = stats.buffer_stats[0].chunks_overwritten
    assert overwritten > 0
    assert len(test_values(read_upstream_trace(out))) < 20_000
    lines = [line for line in result.stderr.decode().splitlines() if "Data lost" in line]
    assert lines == [
        f"Data lost: {overwritten} chunks overwritten before they were read (the ring buffer "
        "wrapped) [chunks_overwritten]"
    ]


def test_a_session_that_lost_nothing_says_nothing_about_losses(
    traced: Traced, producer: Callable[..., Producer], tmp_path: Path
) -> None:
    producer(count=25)
    (tmp_path / "config.pb").write_bytes(_binary_config())
    result = perfetto(traced, "-c", str(tmp_path / "config.pb"), "-o", str(tmp_path / "t.pb"))
    assert result.returncode == 0, result.stderr
    assert "Data lost" not in result.stderr.decode()
