"""The traced command: flags, socket handling, errors and shutdown."""

from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

import pytest
from perfetto_testing import TIMEOUT, wait_for
from traced_testlib import ConsumerSession, Traced

TRACED = [sys.executable, "-m", "perfetto_service.traced"]


@pytest.fixture
def directory() -> Iterator[str]:
    with tempfile.TemporaryDirectory() as path:
        yield path


def _env(producer: str, consumer: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PERFETTO_PRODUCER_SOCK_NAME"] = producer
    env["PERFETTO_CONSUMER_SOCK_NAME"] = consumer
    env.pop("TRACED_NOTIFY_FD", None)
    return env


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*TRACED, *args], env=env, capture_output=True, text=True, timeout=TIMEOUT, check=False
    )


def test_version() -> None:
    for command in ("traced", "traced_relay"):
        result = subprocess.run(
            [str(Path(sys.executable).with_name(command)), "--version"],
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout == f"{command} (perfetto-py) {version('perfetto-service')}\n"


def test_sigterm_and_sigint_remove_the_sockets(directory: str) -> None:
    for signum in (signal.SIGTERM, signal.SIGINT):
        daemon = Traced(directory, producers=2)
        paths = [*daemon.producer_sockets, daemon.consumer_socket]
        assert all(stat.S_ISSOCK(os.stat(path).st_mode) for path in paths)
        daemon.process.send_signal(signum)
        assert daemon.process.wait(TIMEOUT) == 0
        daemon.stop()
        assert not any(os.path.exists(path) for path in paths)


def test_every_listed_producer_socket_serves(directory: str) -> None:
    with Traced(directory, producers=3) as daemon:
        for path in daemon.producer_sockets:
            with socket.socket(socket.AF_UNIX) as probe:
                probe.connect(path)


def test_already_running_is_a_one_line_error(directory: str) -> None:
    with Traced(directory) as daemon:
        result = _run([], daemon.env | {"TRACED_NOTIFY_FD": ""})
        assert result.returncode == 1
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1
        assert lines[0].startswith("traced: already running")
        assert daemon.process.poll() is None
        session = ConsumerSession(daemon.consumer_socket)
        session.close()


def test_stale_sockets_are_replaced(directory: str) -> None:
    producer, consumer = f"{directory}/p", f"{directory}/c"
    for path in (producer, consumer):
        stale = socket.socket(socket.AF_UNIX)
        stale.bind(path)
        stale.close()
    process = subprocess.Popen([*TRACED], env=_env(producer, consumer), stderr=subprocess.PIPE)
    try:
        wait_for(lambda: _accepts(consumer), TIMEOUT)
        assert _accepts(producer)
    finally:
        process.terminate()
        process.wait(TIMEOUT)
        assert process.stderr is not None
        process.stderr.close()


def _accepts(path: str) -> bool:
    with socket.socket(socket.AF_UNIX) as probe:
        try:
            probe.connect(path)
        except OSError:
            return False
        return True


def test_missing_directory_is_a_one_line_error_with_its_cause(directory: str) -> None:
    missing = f"{directory}/no/such/dir"
    result = _run([], _env(f"{missing}/producer", f"{missing}/consumer"))
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"traced: cannot listen on {missing}/producer: No such file or directory "
        "(does the directory exist?)"
    ]


def test_failed_second_bind_leaves_no_socket_files(directory: str) -> None:
    producers = [f"{directory}/p1", f"{directory}/p2"]
    result = _run([], _env(",".join(producers), f"{directory}/missing/c"))
    assert result.returncode == 1
    assert len(result.stderr.splitlines()) == 1
    assert os.listdir(directory) == []


def test_bind_error_names_its_real_cause(directory: str) -> None:
    # 192.0.2.1 is TEST-NET-1: no interface of this machine has it.
    result = _run([], _env(f"{directory}/p", "192.0.2.1:32278"))
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("traced: cannot listen on 192.0.2.1:32278: ")
    assert "writable" not in lines[0]
    assert os.listdir(directory) == []


@pytest.mark.parametrize("name", ["127.0.0.1:99999", "localhost:-1"])
def test_bad_port_is_a_one_line_error(directory: str, name: str) -> None:
    result = _run([], _env(f"{directory}/p", name))
    assert result.returncode == 1
    assert result.stderr.splitlines() == [f"traced: bad port in '{name}': a TCP port is 0 to 65535"]
    assert os.listdir(directory) == []


def test_a_regular_file_in_the_way_is_not_removed(directory: str) -> None:
    producer = Path(directory, "p")
    producer.write_text("precious")
    result = _run([], _env(str(producer), f"{directory}/c"))
    assert result.returncode == 1
    assert "is not a socket" in result.stderr
    assert producer.read_text() == "precious"


def test_set_socket_permissions(directory: str) -> None:
    group = str(os.getgid())
    with Traced(directory, "--set-socket-permissions", f"{group}:0640:{group}:0600") as daemon:
        assert stat.S_IMODE(os.stat(daemon.producer_socket).st_mode) == 0o640
        assert stat.S_IMODE(os.stat(daemon.consumer_socket).st_mode) == 0o600
        assert os.stat(daemon.consumer_socket).st_gid == os.getgid()


@pytest.mark.parametrize(
    "value", ["a:0660:b", "grp:0660::0660", "nosuchgroup-xyz:0660:nosuchgroup-xyz:0660", "0:9z:0:1"]
)
def test_bad_socket_permissions(directory: str, value: str) -> None:
    result = _run(["--set-socket-permissions", value], _env(f"{directory}/p", f"{directory}/c"))
    assert result.returncode == 1
    assert result.stderr.startswith("traced: --set-socket-permissions")
    assert len(result.stderr.strip().splitlines()) == 1
    assert not os.path.exists(f"{directory}/p")


def test_background_prints_the_pid_and_keeps_serving(directory: str) -> None:
    producer, consumer = f"{directory}/p", f"{directory}/c"
    result = _run(["--background"], _env(producer, consumer))
    assert result.returncode == 0, result.stderr
    pid = int(result.stdout.strip())
    try:
        assert _accepts(consumer)
        session = ConsumerSession(consumer)
        session.close()
    finally:
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + TIMEOUT
    while os.path.exists(consumer) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not os.path.exists(consumer)
    assert not os.path.exists(producer)


def test_background_reports_start_errors(directory: str) -> None:
    missing = f"{directory}/missing"
    result = _run(["--background"], _env(f"{missing}/p", f"{missing}/c"))
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.startswith("traced: cannot listen on")


def test_sockets_created_by_init_are_served(directory: str) -> None:
    producer_path, consumer_path = f"{directory}/init-p", f"{directory}/init-c"
    listeners = []
    for path in (producer_path, consumer_path):
        listener = socket.socket(socket.AF_UNIX)
        listener.bind(path)
        listener.listen()
        listeners.append(listener)
    env = _env(f"{directory}/unused-p", f"{directory}/unused-c")
    env["ANDROID_SOCKET_traced_producer"] = str(listeners[0].fileno())
    env["ANDROID_SOCKET_traced_consumer"] = str(listeners[1].fileno())
    process = subprocess.Popen(
        TRACED, env=env, pass_fds=[s.fileno() for s in listeners], stderr=subprocess.PIPE
    )
    for listener in listeners:
        listener.close()
    try:
        session = ConsumerSession(consumer_path)
        session.close()
        assert _accepts(producer_path)
        assert not os.path.exists(f"{directory}/unused-c")
    finally:
        process.terminate()
        process.wait(TIMEOUT)
        assert process.stderr is not None
        process.stderr.close()
    assert os.path.exists(consumer_path)


def test_init_sockets_come_in_pairs(directory: str) -> None:
    env = _env(f"{directory}/p", f"{directory}/c") | {"ANDROID_SOCKET_traced_producer": "3"}
    result = _run([], env)
    assert result.returncode == 1
    assert "set both or neither" in result.stderr


def test_unknown_flag_is_a_one_line_error() -> None:
    result = _run(["--bogus"], dict(os.environ))
    assert result.returncode == 2
    assert result.stderr == "traced: unrecognized arguments: --bogus (see traced --help)\n"


def test_the_start_up_line_says_which_build_runs(directory: str) -> None:
    producer, consumer = f"{directory}/p", f"{directory}/c"
    process = subprocess.Popen(
        [*TRACED], env=_env(producer, consumer), stderr=subprocess.PIPE, text=True
    )
    assert process.stderr is not None
    try:
        # The line comes once both sockets listen: read up to it (or to traced's end).
        started = next((line for line in process.stderr if "Started traced" in line), "")
    finally:
        process.terminate()
        process.wait(TIMEOUT)
        process.stderr.close()
    build = "pure" if os.environ.get("PERFETTO_PY_PURE") == "1" else "compiled"
    assert f"Started traced ({build} build), listening on {producer}" in started
