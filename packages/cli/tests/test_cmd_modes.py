"""Light mode, background, detach/attach, query and triggers, as separate command invocations."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path

import pytest
from cmdlib import Producer, Traced, perfetto, start_perfetto, test_values
from perfetto_protos.common.tracing_service_state_pb2 import TracingServiceState
from perfetto_protos.config.trace_config_pb2 import TraceConfig
from perfetto_testing import read_upstream_trace

WRITE_INTO_FILE = """
buffers { size_kb: 1024 }
data_sources { config { name: "test.ds" } }
write_into_file: true
file_write_period_ms: 100
duration_ms: 600000
"""


def _trace_configs(path: Path) -> list[TraceConfig]:
    return [
        TraceConfig.FromString(p.trace_config.SerializeToString())
        for p in read_upstream_trace(path).packet
        if p.HasField("trace_config")
    ]


def test_light_mode_maps_categories_to_track_event_and_says_what_it_ignored(
    traced: Traced, producer: Callable[..., Producer], tmp_path: Path
) -> None:
    producer("track_event", count=4)
    out = tmp_path / "t"
    result = perfetto(
        traced, "-t", "500ms", "-b", "2mb", "-o", str(out), "cat1", "sched/sched_switch",
        "-a", "com.example", "cat2",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    stderr = result.stderr.decode()
    assert "Ignoring ftrace event sched/sched_switch" in stderr
    assert "Ignoring atrace app com.example" in stderr
    (config,) = _trace_configs(out)
    assert config.duration_ms == 500
    assert [b.size_kb for b in config.buffers] == [2048]
    (source,) = config.data_sources
    assert source.config.name == "track_event"
    assert list(source.config.track_event_config.enabled_categories) == ["cat1", "cat2"]
    assert list(source.config.track_event_config.disabled_categories) == ["*"]
    assert test_values(read_upstream_trace(out)) == [0, 1, 2, 3]


def test_light_mode_size_streams_into_the_file(
    traced: Traced, producer: Callable[..., Producer], tmp_path: Path
) -> None:
    producer("track_event", count=5)
    out = tmp_path / "t"
    result = perfetto(traced, "-t", "300ms", "-s", "1mb", "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert "Trace written into the output file" in result.stderr.decode()
    (config,) = _trace_configs(out)
    assert config.write_into_file
    assert config.max_file_size_bytes == 1024 * 1024
    assert test_values(read_upstream_trace(out)) == list(range(5))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-t", "10x"], "--time argument is invalid"),
        (["-b", "lots"], "--buffer argument is invalid"),
        (["-t", "1s", "-c", "cfg"], "Cannot specify both -c/--config and any of --time"),
        (["--query", "--detach=k"], "--query cannot be combined with any other argument"),
        (["--long"], "--long can only be used with --query"),
        (["--attach=a", "--detach=b"], "--attach and --detach are mutually exclusive"),
        (["--txt", "--txt-lossy", "-c", "x"], "--txt and --txt-lossy are mutually exclusive"),
        (["--stop"], "--stop is supported only in combination with --attach"),
        (["--clone", "1", "--clone-by-name", "x"], "mutually exclusive"),
        (["--bogus"], "unrecognized arguments: --bogus"),
        (["-c", "/no/such/config", "-o", "x"], "Could not open /no/such/config"),
        (["--upload"], "--upload is only supported on Android"),
        (["--attach=k", "-o", "x"], "Can't pass an --out file"),
    ],
)
def test_user_mistakes_are_one_line_and_exit_1(
    traced: Traced, args: list[str], message: str
) -> None:
    result = perfetto(traced, *args)
    assert result.returncode == 1
    lines = result.stderr.decode().splitlines()
    assert len(lines) == 1, lines
    assert message in lines[0]


def test_no_arguments_and_help_print_usage(traced: Traced) -> None:
    for args in ([], ["-h"], ["--help"]):
        result = perfetto(traced, *args)
        assert result.returncode == 1  # as upstream's
        assert b"--config" in result.stderr
        assert b"--detach=KEY" in result.stderr


def test_version(traced: Traced) -> None:
    for command in ("perfetto", "trigger_perfetto"):
        result = perfetto(traced, "--version", command=command)
        assert result.returncode == 0, result.stderr
        assert result.stdout.decode() == f"{command} (perfetto-py) {version('perfetto-cmd')}\n"


def test_detach_then_is_detached_then_attach_stop_across_invocations(
    traced: Traced, producer: Callable[..., Producer], tmp_path: Path
) -> None:
    test_producer = producer(count=6)
    out = tmp_path / "t"
    cfg = tmp_path / "c.txt"
    cfg.write_text(WRITE_INTO_FILE)
    detach = perfetto(traced, "--txt", "-c", str(cfg), "-o", str(out), "--detach=mykey")
    assert detach.returncode == 0, detach.stderr
    test_producer.wait_for("WROTE")
    assert perfetto(traced, "--is_detached=mykey").returncode == 0
    assert perfetto(traced, "--is_detached=mykey").returncode == 0  # still detached after
    assert perfetto(traced, "--is_detached=other").returncode == 2
    attach = perfetto(traced, "--attach=mykey", "--stop")
    assert attach.returncode == 0, attach.stderr
    assert "Trace written into the output file" in attach.stderr.decode()
    assert test_values(read_upstream_trace(out)) == list(range(6))
    assert perfetto(traced, "--is_detached=mykey").returncode == 2
    missing = perfetto(traced, "--attach=mykey")
    assert missing.returncode == 2
    assert "Session re-attach failed" in missing.stderr.decode()


def test_detach_needs_write_into_file(traced: Traced, tmp_path: Path) -> None:
    text = 'buffers { size_kb: 64 } data_sources { config { name: "x" } }'
    result = perfetto(
        traced, "--txt", "-c", "-", "-o", str(tmp_path / "t"), "--detach=k", input=text.encode()
    )
    assert result.returncode == 1
    assert "write_into_file must be true when using --detach" in result.stderr.decode()


def test_is_detached_without_traced_is_an_error(tmp_path: Path) -> None:
    env_holder = Traced.__new__(Traced)
    env_holder.env = dict(os.environ, PERFETTO_CONSUMER_SOCK_NAME=str(tmp_path / "none"))
    assert perfetto(env_holder, "--is_detached=k").returncode == 1


def test_query_lists_producers_data_sources_and_sessions(
    traced: Traced, producer: Callable[..., Producer], tmp_path: Path
) -> None:
    producer("my.source", count=1)
    cfg = tmp_path / "c.txt"
    cfg.write_text(WRITE_INTO_FILE + 'unique_session_name: "queried"\n')
    assert (
        perfetto(
            traced, "--txt", "-c", str(cfg), "-o", str(tmp_path / "t"), "--detach=q"
        ).returncode
        == 0
    )
    result = perfetto(traced, "--query")
    assert result.returncode == 0, result.stderr
    text = result.stdout.decode()
    assert "PRODUCER PROCESSES CONNECTED:" in text
    assert "cmd-test-producer" in text
    assert "my.source" in text
    session_lines = [line for line in text.splitlines() if line.rstrip().endswith("queried")]
    assert len(session_lines) == 1
    raw = perfetto(traced, "--query-raw")
    assert raw.returncode == 0
    state = TracingServiceState.FromString(raw.stdout)
    assert [s.unique_session_name for s in state.tracing_sessions] == ["queried"]
    assert any(d.ds_descriptor.name == "my.source" for d in state.data_sources)
    assert perfetto(traced, "--attach=q", "--stop").returncode == 0


def test_query_lists_twenty_thousand_data_sources(
    traced: Traced, producer: Callable[..., Producer], tmp_path: Path
) -> None:
    # The state is ~1 MB: QueryServiceState answers in has_more chunks under the frame cap.
    producer("many.source", count=1, extra=20_000)
    result = perfetto(traced, "--query")
    assert result.returncode == 0, result.stderr
    listed = {line.split()[0] for line in result.stdout.decode().splitlines() if line}
    assert {f"many.source.{number}" for number in range(20_000)} <= listed
    assert "many.source" in listed
    raw = perfetto(traced, "--query-raw")
    assert raw.returncode == 0, raw.stderr
    state = TracingServiceState.FromString(raw.stdout)
    assert len(state.data_sources) == 20_001


def test_activate_triggers_config_and_trigger_perfetto_stop_a_session(
    traced: Traced, producer: Callable[..., Producer], tmp_path: Path
) -> None:
    test_producer = producer(count=3)
    session_cfg = tmp_path / "session.txt"
    session_cfg.write_text(
        """
        buffers { size_kb: 256 }
        data_sources { config { name: "test.ds" } }
        trigger_config {
          trigger_mode: STOP_TRACING
          triggers { name: "stop-now" stop_delay_ms: 0 }
          trigger_timeout_ms: 600000
        }
        """
    )
    out = tmp_path / "t"
    session = start_perfetto(traced, "--txt", "-c", str(session_cfg), "-o", str(out))
    test_producer.wait_for("WROTE")
    trigger_cfg = 'activate_triggers: "stop-now"'
    result = perfetto(traced, "--txt", "-c", "-", input=trigger_cfg.encode())
    assert result.returncode == 0, result.stderr
    _, stderr = session.communicate(timeout=60)
    assert session.returncode == 0, stderr
    trace = read_upstream_trace(out)
    assert test_values(trace) == [0, 1, 2]
    assert [p.trigger.trigger_name for p in trace.packet if p.HasField("trigger")] == ["stop-now"]

    second = start_perfetto(traced, "--txt", "-c", str(session_cfg), "-o", str(out))
    test_producer.wait_for("WROTE")
    assert perfetto(traced, "stop-now", command="trigger_perfetto").returncode == 0
    _, stderr = second.communicate(timeout=60)
    assert second.returncode == 0, stderr


def test_trigger_perfetto_usage_and_unknown_options(traced: Traced) -> None:
    assert perfetto(traced, command="trigger_perfetto").returncode == 1
    result = perfetto(traced, "--future-flag", "t1", command="trigger_perfetto")
    assert result.returncode == 0
    assert b"Ignoring unknown arguments" in result.stderr


def test_background_prints_the_pid_and_keeps_tracing(
    traced: Traced, producer: Callable[..., Producer], tmp_path: Path
) -> None:
    test_producer = producer(count=4)
    out = tmp_path / "t"
    text = 'buffers { size_kb: 256 } data_sources { config { name: "test.ds" } }'
    result = perfetto(traced, "--txt", "-c", "-", "-o", str(out), "-D", input=text.encode())
    assert result.returncode == 0, result.stderr
    pid = int(result.stdout.decode().strip())
    test_producer.wait_for("WROTE")
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 60
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert test_values(read_upstream_trace(out)) == [0, 1, 2, 3]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0] != "Z"


def test_notify_fd_reports_all_data_sources_started(
    traced: Traced, producer: Callable[..., Producer], tmp_path: Path
) -> None:
    producer(count=1)
    read_end, write_end = os.pipe()
    text = 'buffers { size_kb: 64 } data_sources { config { name: "test.ds" } } duration_ms: 60000'
    (tmp_path / "c").write_text(text)
    command = start_perfetto(
        traced, "--txt", "-c", str(tmp_path / "c"), "-o", str(tmp_path / "t"),
        "--notify-fd", str(write_end), pass_fds=(write_end,),
    )  # fmt: skip
    os.close(write_end)
    try:
        assert os.read(read_end, 1) == b"\x00"
        assert os.read(read_end, 1) == b""  # closed after the one status byte
    finally:
        os.close(read_end)
        command.send_signal(signal.SIGTERM)
        command.communicate(timeout=60)
    assert command.returncode == 0


def test_clone_and_clone_by_name_snapshot_a_running_session(
    traced: Traced, producer: Callable[..., Producer], tmp_path: Path
) -> None:
    test_producer = producer(count=8)
    cfg = tmp_path / "c.txt"
    cfg.write_text(
        'buffers { size_kb: 256 } data_sources { config { name: "test.ds" } }\n'
        'duration_ms: 600000 unique_session_name: "long"\n'
    )
    out = tmp_path / "main"
    session = start_perfetto(traced, "--txt", "-c", str(cfg), "-o", str(out))
    test_producer.wait_for("WROTE")
    for args in (["--clone", "1"], ["--clone-by-name", "long"]):
        clone_out = tmp_path / f"clone{args[0]}"
        result = perfetto(traced, *args, "-o", str(clone_out))
        assert result.returncode == 0, result.stderr
        assert f"Wrote {clone_out.stat().st_size} bytes into {clone_out}" in result.stderr.decode()
        assert test_values(read_upstream_trace(clone_out)) == list(range(8))
    assert session.poll() is None  # the cloned session keeps running
    session.send_signal(signal.SIGTERM)
    session.communicate(timeout=60)
    assert test_values(read_upstream_trace(out)) == list(range(8))


def test_clone_of_a_missing_session_is_a_service_error(traced: Traced, tmp_path: Path) -> None:
    out = tmp_path / "t"
    result = perfetto(traced, "--clone", "77", "-o", str(out))
    assert result.returncode == 0  # upstream's soft service error
    assert (
        "Service error: Failed to clone tracing session 77: Tracing session not found"
        in result.stderr.decode()
    )
    assert not out.exists()


def test_clone_snapshot_triggers_write_numbered_snapshots(
    traced: Traced, producer: Callable[..., Producer], tmp_path: Path
) -> None:
    test_producer = producer(count=4)
    cfg = tmp_path / "c.txt"
    cfg.write_text(
        """
        buffers { size_kb: 256 }
        data_sources { config { name: "test.ds" } }
        trigger_config {
          trigger_mode: CLONE_SNAPSHOT
          triggers { name: "snap" }
          trigger_timeout_ms: 600000
        }
        """
    )
    out = tmp_path / "out"
    session = start_perfetto(traced, "--txt", "-c", str(cfg), "-o", str(out))
    test_producer.wait_for("WROTE")
    for number in range(2):
        assert perfetto(traced, "snap", command="trigger_perfetto").returncode == 0
        snapshot = tmp_path / f"out.{number}"
        deadline = time.monotonic() + 60
        while not _complete_trace(snapshot) and time.monotonic() < deadline:
            time.sleep(0.05)
        trace = read_upstream_trace(snapshot)
        assert test_values(trace) == [0, 1, 2, 3]
        assert [p.trigger.trigger_name for p in trace.packet if p.HasField("trigger")] == ["snap"]
    session.send_signal(signal.SIGTERM)
    _, stderr = session.communicate(timeout=60)
    assert session.returncode == 0, stderr
    assert b"Wrote" in stderr


def _complete_trace(path: Path) -> bool:
    if not path.exists():
        return False
    try:
        return any(p.HasField("trace_stats") for p in read_upstream_trace(path).packet)
    except Exception:
        return False


def test_background_without_wait_returns_at_once_with_the_pid(
    traced: Traced, producer: Callable[..., Producer], tmp_path: Path
) -> None:
    test_producer = producer(count=2)
    out = tmp_path / "t"
    text = 'buffers { size_kb: 64 } data_sources { config { name: "test.ds" } }'
    result = perfetto(traced, "--txt", "-c", "-", "-o", str(out), "-d", input=text.encode())
    assert result.returncode == 0, result.stderr
    pid = int(result.stdout.decode().strip())
    test_producer.wait_for("WROTE")
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 60
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert test_values(read_upstream_trace(out)) == [0, 1]


def test_an_output_path_that_cannot_be_opened_is_one_line(traced: Traced, tmp_path: Path) -> None:
    text = 'buffers { size_kb: 64 } data_sources { config { name: "x" } }'
    target = tmp_path / "no" / "such" / "dir"
    result = perfetto(traced, "--txt", "-c", "-", "-o", str(target), input=text.encode())
    assert result.returncode == 1
    assert result.stderr.decode().splitlines() == [
        f"perfetto: Failed to open {target}: No such file or directory"
    ]
