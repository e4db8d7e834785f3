"""traced_relay: producers on two relays and one local, one session on the central traced.

The relays forward over loopback TCP; every producer's packets must arrive, tagged with the
machine id of the relay it came through, with a RemoteClockSync and a SystemInfo per relay
machine so that a reader can put both machines on the central service's timeline.
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from perfetto_protos.common.system_info_pb2 import SystemInfo
from perfetto_protos.ipc import relay_port_pb2 as relay_pb
from perfetto_testing import TIMEOUT
from perfetto_wire import Client
from perfetto_wire._host import machine_id_for
from traced_testlib import (
    ConsumerSession,
    Traced,
    fortesting_packets,
    free_tcp_port,
    make_config,
    start_producers,
)

COUNT = 500
BOOTTIME = 6


class Relay:
    """A traced_relay process listening on `listen`, relaying to `remote` as `machine`."""

    def __init__(self, listen: str, remote: str, machine: str) -> None:
        env = dict(os.environ)
        env["PERFETTO_PRODUCER_SOCK_NAME"] = listen
        env["PERFETTO_RELAY_SOCK_NAME"] = remote
        env["PERFETTO_MACHINE_NAME"] = machine
        self.process = subprocess.Popen(
            [sys.executable, "-m", "perfetto_service.traced.relay", "--machine-id-hint", machine],
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self.synced = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append(line.strip())
            if "clocks synced" in line:
                self.synced.set()

    def close(self) -> None:
        self.process.terminate()
        try:
            assert self.process.wait(TIMEOUT) == 0, self.lines
        finally:
            self.process.kill()
            self._reader.join(TIMEOUT)


@pytest.fixture
def directory() -> Iterator[str]:
    with tempfile.TemporaryDirectory() as path:
        yield path


def test_two_relays_and_a_local_producer_reach_one_session_tagged_by_machine(
    directory: str,
) -> None:
    tcp = f"127.0.0.1:{free_tcp_port()}"
    with Traced(directory, "--enable-relay-endpoint", extra_producer_sockets=[tcp]) as traced:
        relays = {
            machine: Relay(f"{directory}/{machine}.sock", tcp, machine)
            for machine in ("machine-a", "machine-b")
        }
        producers = []
        consumer = None
        try:
            for relay in relays.values():
                assert relay.synced.wait(TIMEOUT), relay.lines
            for machine in relays:
                producers += start_producers(
                    f"{directory}/{machine}.sock", [f"producer.{machine}"], COUNT
                )
            producers += start_producers(traced.producer_socket, ["producer.local"], COUNT)
            consumer = ConsumerSession(traced.consumer_socket)
            consumer.client.enable_tracing(make_config(trace_all_machines=True))
            for producer in producers:
                producer.wait_line("WROTE", timeout=TIMEOUT)
            consumer.client.disable_tracing()
            consumer.wait_disabled()
            trace = consumer.read_trace()
        finally:
            if consumer is not None:
                consumer.close()
            for producer in producers:
                producer.close()
            for relay in relays.values():
                relay.close()
    _check_trace(trace)


def _check_trace(trace: Any) -> None:
    expected_machine = {
        "producer.machine-a": machine_id_for("machine-a"),
        "producer.machine-b": machine_id_for("machine-b"),
        "producer.local": 0,
    }
    counts: Counter[str] = Counter()
    for packet in fortesting_packets(trace):
        name = packet.for_testing.str.split("/")[0]
        counts[name] += 1
        assert packet.machine_id == expected_machine[name], name
    assert counts == dict.fromkeys(expected_machine, COUNT)

    remote = {machine_id_for("machine-a"), machine_id_for("machine-b")}
    syncs = {
        p.machine_id: p.remote_clock_sync for p in trace.packet if p.HasField("remote_clock_sync")
    }
    assert set(syncs) == remote
    for sync in syncs.values():
        assert sync.synced_clocks
        for exchange in sync.synced_clocks:
            client = {c.clock_id: c.timestamp for c in exchange.client_clocks.clocks}
            host = {c.clock_id: c.timestamp for c in exchange.host_clocks.clocks}
            # Both machines are this one: the service read its clock after the relay did.
            assert BOOTTIME in client
            assert BOOTTIME in host
            assert host[BOOTTIME] >= client[BOOTTIME]
    infos = {p.machine_id: p.system_info for p in trace.packet if p.HasField("system_info")}
    assert remote <= set(infos)
    for machine_id in remote:
        assert "traced_relay" in infos[machine_id].tracing_service_version
        assert infos[machine_id].utsname.sysname == os.uname().sysname


def test_traced_records_a_relay_s_clock_exchanges_and_system_info_as_sent(
    directory: str,
) -> None:
    """The RelayPort as upstream's traced_relay drives it, with a clock 1000 s ahead.

    Ahead, not behind: a machine booted less than 1000 s ago has no BOOTTIME to go back to.
    """
    tcp = f"127.0.0.1:{free_tcp_port()}"
    ahead_ns = 1000 * 10**9
    sent: list[int] = []
    with Traced(directory, "--enable-relay-endpoint", extra_producer_sockets=[tcp]) as traced:
        client = Client(tcp)
        consumer = None
        try:
            proxy = client.bind("RelayPort").result(TIMEOUT)
            connection = client.async_client.connection
            assert connection is not None
            client.post(lambda: connection.set_peer_identity(4321, 0, "remote-box", "remote"))
            info = SystemInfo(tracing_service_version="a relay")
            info.utsname.sysname = "RemoteOS"
            request = relay_pb.InitRelayRequest(system_info=info)
            client.invoke(proxy, "InitRelay", request).result(TIMEOUT)
            for phase in (relay_pb.SyncClockRequest.PING, relay_pb.SyncClockRequest.UPDATE):
                sent.append(time.clock_gettime_ns(time.CLOCK_BOOTTIME) + ahead_ns)
                clock_request = relay_pb.SyncClockRequest(phase=phase)
                clock_request.clocks.add(clock_id=BOOTTIME, timestamp=sent[-1])
                client.invoke(proxy, "SyncClock", clock_request).result(TIMEOUT)
            consumer = ConsumerSession(traced.consumer_socket)
            consumer.client.enable_tracing(make_config())
            consumer.client.disable_tracing()
            consumer.wait_disabled()
            trace = consumer.read_trace()
        finally:
            if consumer is not None:
                consumer.close()
            client.close()
    machine_id = machine_id_for("remote-box")
    syncs = [p for p in trace.packet if p.HasField("remote_clock_sync")]
    assert [p.machine_id for p in syncs] == [machine_id]
    exchanges = syncs[0].remote_clock_sync.synced_clocks
    assert [e.client_clocks.clocks[0].timestamp for e in exchanges] == sent
    for exchange in exchanges:
        host = {c.clock_id: c.timestamp for c in exchange.host_clocks.clocks}
        # A reader maps the relay's BOOTTIME onto the service's by this offset.
        offset = host[BOOTTIME] - exchange.client_clocks.clocks[0].timestamp
        assert -ahead_ns <= offset < -ahead_ns + int(TIMEOUT * 10**9)
    infos = [p for p in trace.packet if p.HasField("system_info") and p.machine_id == machine_id]
    assert [
        (p.system_info.tracing_service_version, p.system_info.utsname.sysname) for p in infos
    ] == [("a relay", "RemoteOS")]


def test_background_relay_with_socket_permissions_relays_producers(directory: str) -> None:
    tcp = f"127.0.0.1:{free_tcp_port()}"
    listen = f"{directory}/relay.sock"
    env = dict(os.environ)
    env["PERFETTO_PRODUCER_SOCK_NAME"] = listen
    env["PERFETTO_RELAY_SOCK_NAME"] = tcp
    group = str(os.getgid())
    with Traced(directory, "--enable-relay-endpoint", extra_producer_sockets=[tcp]) as traced:
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "perfetto_service.traced.relay",
                "--background",
                "--set-socket-permissions",
                f"{group}:0660",
                "--machine-id-hint",
                "machine-bg",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        pid = int(result.stdout.strip())  # returns once the socket is there: no waiting
        producers = []
        consumer = None
        try:
            assert stat.S_IMODE(os.stat(listen).st_mode) == 0o660
            assert os.stat(listen).st_gid == os.getgid()
            producers = start_producers(listen, ["producer.bg"], COUNT)
            consumer = ConsumerSession(traced.consumer_socket)
            consumer.client.enable_tracing(make_config(trace_all_machines=True))
            producers[0].wait_line("WROTE", timeout=TIMEOUT)
            consumer.client.disable_tracing()
            consumer.wait_disabled()
            trace = consumer.read_trace()
        finally:
            if consumer is not None:
                consumer.close()
            for producer in producers:
                producer.close()
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + TIMEOUT
            while _running(pid) and time.monotonic() < deadline:
                time.sleep(0.02)
    assert not _running(pid)  # the daemon stopped on SIGTERM
    relayed = [p for p in trace.packet if p.HasField("for_testing")]
    assert len(relayed) == COUNT
    assert {p.machine_id for p in relayed} == {machine_id_for("machine-bg")}


def _running(pid: int) -> bool:
    """Whether `pid` (not our child: the daemon is reparented) is alive and not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


@pytest.mark.parametrize("value", ["0660", "grp:", "nosuchgroup-xyz:0660", "0:9z", "0:0660:0:0660"])
def test_bad_socket_permissions_get_one_line(directory: str, value: str) -> None:
    env = dict(os.environ)
    env["PERFETTO_PRODUCER_SOCK_NAME"] = f"{directory}/relay.sock"
    env["PERFETTO_RELAY_SOCK_NAME"] = "127.0.0.1:1"
    result = subprocess.run(
        [sys.executable, "-m", "perfetto_service.traced.relay", "--set-socket-permissions", value],
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert result.returncode == 1
    assert result.stderr.startswith("traced_relay: --set-socket-permissions")
    assert len(result.stderr.strip().splitlines()) == 1
    assert not os.path.exists(f"{directory}/relay.sock")


def test_machine_name_filter_picks_machines_by_name_host_included(
    directory: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Upstream's rule: a data source's machine_name_filter names the machines whose producers
    it starts (the central one by its own name, or "host"), whatever trace_all_machines says."""
    monkeypatch.setenv("PERFETTO_MACHINE_NAME", "central-box")
    tcp = f"127.0.0.1:{free_tcp_port()}"
    with Traced(directory, "--enable-relay-endpoint", extra_producer_sockets=[tcp]) as traced:
        relays = {
            machine: Relay(f"{directory}/{machine}.sock", tcp, machine)
            for machine in ("machine-a", "machine-b")
        }
        producers: dict[str, Any] = {}
        consumer = None
        try:
            for relay in relays.values():
                assert relay.synced.wait(TIMEOUT), relay.lines
            for machine in relays:
                (producers[machine],) = start_producers(
                    f"{directory}/{machine}.sock", [f"producer.{machine}"], COUNT
                )
            (producers["local"],) = start_producers(
                traced.producer_socket, ["producer.local"], COUNT
            )
            config = make_config()
            config.data_sources[0].machine_name_filter.extend(["machine-b", "central-box"])
            consumer = ConsumerSession(traced.consumer_socket)
            consumer.client.enable_tracing(config)
            for machine in ("machine-b", "local"):
                producers[machine].wait_line("WROTE", timeout=TIMEOUT)
            consumer.client.disable_tracing()
            consumer.wait_disabled()
            trace = consumer.read_trace()
        finally:
            if consumer is not None:
                consumer.close()
            for producer in producers.values():
                producer.close()
            for relay in relays.values():
                relay.close()
    counts = Counter(p.for_testing.str.split("/")[0] for p in fortesting_packets(trace))
    assert counts == {"producer.machine-b": COUNT, "producer.local": COUNT}
