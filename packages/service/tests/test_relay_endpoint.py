"""RelayPort only where traced was told to serve it (upstream's --enable-relay-endpoint[-on]).

A relay's InitRelay puts a SystemInfo packet into every trace with the service's trusted uid:
a local user who could bind RelayPort on the AF_UNIX producer socket could forge one in
root's trace. These tests are that user: a process that switched to uid 65534 before it
connected (so SO_PEERCRED names it), speaking the wire protocol by hand.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import pytest
from perfetto_protos.common.system_info_pb2 import SystemInfo
from perfetto_protos.ipc import relay_port_pb2 as relay_pb
from perfetto_testing import TIMEOUT
from perfetto_wire import Client, WireError
from traced_testlib import ConsumerSession, RawClient, Traced, free_tcp_port, make_config

NOBODY = 65534
FORGED_SYSNAME = "ForgedOS"
_PERMISSIONS = ("--set-socket-permissions", "0:0666:0:0600")

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="switching uid needs root")


@pytest.fixture
def directory() -> Iterator[str]:
    """A socket directory uid 65534 can enter."""
    with tempfile.TemporaryDirectory() as path:
        os.chmod(path, 0o755)
        yield path


def _forge(path: str, report: int, hold: int) -> None:
    """Binds RelayPort and sends InitRelay with a forged SystemInfo; writes what was answered
    to `report`, then stays connected (as a relay does) until `hold` reads end of file."""
    client = RawClient(path)
    try:
        reply = client.bind("RelayPort")
        info = SystemInfo(tracing_service_version="forged")
        info.utsname.sysname = FORGED_SYSNAME
        args = relay_pb.InitRelayRequest(system_info=info).SerializeToString()
        methods = {method.name: method.id for method in reply.methods}
        # Bound or not, try: RelayPort was service 2 beside ProducerPort, InitRelay method 1.
        service_id = reply.service_id if reply.success else 2
        answer = client.invoke(service_id, methods.get("InitRelay", 1), args)
        os.write(
            report, json.dumps({"bound": reply.success, "init_relay": answer.success}).encode()
        )
        os.close(report)
        os.read(hold, 1)
    finally:
        client.close()


@contextlib.contextmanager
def _forger_as_nobody(path: str) -> Iterator[dict[str, Any]]:
    """`_forge` in a child process that became uid/gid 65534 before connecting: yields what
    the service answered while the child stays connected."""
    report_read, report_write = os.pipe()
    hold_read, hold_write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child)
        status = 1
        try:
            os.close(report_read)
            os.close(hold_write)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            _forge(path, report_write, hold_read)
            status = 0
        except BaseException as exc:  # reported to the parent
            with contextlib.suppress(OSError):
                os.write(report_write, json.dumps({"error": repr(exc)}).encode())
        finally:
            os._exit(status)
    os.close(report_write)
    os.close(hold_read)
    try:
        ready, _, _ = select.select([report_read], [], [], TIMEOUT)
        assert ready, "the uid 65534 child did not answer"
        with os.fdopen(report_read, "rb", closefd=False) as out:
            result: dict[str, Any] = json.loads(out.read() or b"{}")
        assert "error" not in result, result
        yield result
    finally:
        os.close(report_read)
        os.close(hold_write)
        deadline = time.monotonic() + TIMEOUT
        while os.waitpid(pid, os.WNOHANG) == (0, 0):
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                break
            time.sleep(0.01)


def _forged_packets(traced: Traced) -> list[Any]:
    consumer = ConsumerSession(traced.consumer_socket)
    try:
        consumer.client.enable_tracing(make_config())
        consumer.client.disable_tracing()
        consumer.wait_disabled()
        trace = consumer.read_trace()
    finally:
        consumer.close()
    infos = [p for p in trace.packet if p.HasField("system_info")]
    assert infos, "the trace has the service's own SystemInfo"
    return [p for p in infos if p.system_info.utsname.sysname == FORGED_SYSNAME]


def _bind_relay_port(address: str) -> bool:
    """Whether BindService("RelayPort") succeeds on `address` (as this process)."""
    client = Client(address)
    try:
        client.bind("RelayPort").result(TIMEOUT)
    except WireError:
        return False
    finally:
        client.close()
    return True


@needs_root
def test_a_local_user_cannot_bind_relay_port_on_the_producer_socket(directory: str) -> None:
    traced = Traced(directory, *_PERMISSIONS)
    with traced, _forger_as_nobody(traced.producer_socket) as result:
        forged = _forged_packets(traced)
    assert result == {"bound": False, "init_relay": False}
    assert forged == []  # the old code wrote it: trusted_uid 0, sysname ForgedOS


@needs_root
def test_enable_relay_endpoint_on_serves_relay_port_on_the_named_socket_only(
    directory: str,
) -> None:
    tcp = f"127.0.0.1:{free_tcp_port()}"
    flags = ("--enable-relay-endpoint-on", tcp, *_PERMISSIONS)
    with Traced(directory, *flags, extra_producer_sockets=[tcp]) as traced:
        with _forger_as_nobody(traced.producer_socket) as result:
            forged = _forged_packets(traced)
        assert _bind_relay_port(tcp)
    assert result == {"bound": False, "init_relay": False}
    assert forged == []


@needs_root
def test_enable_relay_endpoint_serves_relay_port_on_every_producer_socket(
    directory: str,
) -> None:
    """Upstream's switch exposes the local socket too (its docs warn): the user asked."""
    traced = Traced(directory, "--enable-relay-endpoint", *_PERMISSIONS)
    with traced, _forger_as_nobody(traced.producer_socket) as result:
        forged = _forged_packets(traced)
    assert result == {"bound": True, "init_relay": True}
    assert len(forged) == 1


def test_relay_port_is_not_served_on_a_tcp_producer_socket_by_default(directory: str) -> None:
    tcp = f"127.0.0.1:{free_tcp_port()}"
    with Traced(directory, extra_producer_sockets=[tcp]):
        assert not _bind_relay_port(tcp)


def test_enable_relay_endpoint_on_a_socket_traced_does_not_serve_fails_in_one_line(
    directory: str,
) -> None:
    env = dict(os.environ)
    env["PERFETTO_PRODUCER_SOCK_NAME"] = f"{directory}/producer"
    env["PERFETTO_CONSUMER_SOCK_NAME"] = f"{directory}/consumer"
    result = subprocess.run(
        [sys.executable, "-m", "perfetto_service.traced", "--enable-relay-endpoint-on", "x:1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"traced: --enable-relay-endpoint-on=x:1 names no producer socket "
        f"(the producer sockets: {directory}/producer)"
    ]
    assert not os.path.exists(f"{directory}/producer")
