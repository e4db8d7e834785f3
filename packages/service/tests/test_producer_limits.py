"""What a producer can make a real traced hold.

Writer ids are upstream's (1 to 32767 per producer): ids beyond are refused, so a flood of
RegisterTraceWriter calls cannot grow traced.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from perfetto_protos.ipc import producer_port_pb2 as pb
from perfetto_smb import MAX_WRITER_ID
from traced_testlib import RawClient, Traced

TIMEOUT = 60.0
WRITERS = 300_000


@pytest.fixture
def traced(tmp_path: Path) -> Iterator[Traced]:
    with Traced(str(tmp_path)) as traced:
        yield traced


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for {pid}")


def _connected_producer(path: str) -> tuple[RawClient, int, dict[str, int]]:
    client = RawClient(path)
    reply = client.bind("ProducerPort")
    assert reply.success
    methods = {method.name: method.id for method in reply.methods}
    request = pb.InitializeConnectionRequest(producer_name="flood")
    init = client.invoke(
        reply.service_id, methods["InitializeConnection"], request.SerializeToString()
    )
    assert init.success
    return client, reply.service_id, methods


def test_register_trace_writer_flood_is_refused_beyond_upstream_ids(traced: Traced) -> None:
    client, service_id, methods = _connected_producer(traced.producer_socket)
    try:
        method = methods["RegisterTraceWriter"]
        for writer_id in (1, MAX_WRITER_ID):  # the allocator's pages are there first
            args = pb.RegisterTraceWriterRequest(trace_writer_id=writer_id, target_buffer=1)
            client.sock.sendall(
                client.frame(service_id, method, args.SerializeToString(), drop_reply=True)
            )
        assert client.invoke(service_id, methods["Sync"], b"").success
        before = _rss_kib(traced.pid)
        for first in range(1, WRITERS + 1, 10_000):
            client.sock.sendall(
                b"".join(
                    client.frame(
                        service_id,
                        method,
                        pb.RegisterTraceWriterRequest(
                            trace_writer_id=writer_id, target_buffer=1
                        ).SerializeToString(),
                        drop_reply=True,
                    )
                    for writer_id in range(first, first + 10_000)
                )
            )
        assert client.invoke(service_id, methods["Sync"], b"").success
        grown_kib = _rss_kib(traced.pid) - before
    finally:
        client.close()
    # 300,000 writers held took ~21 MB; 32,767 at most take ~2.5 MB.
    assert grown_kib < 8 * 1024, f"traced grew by {grown_kib} KiB"
    traced.wait_log("RegisterTraceWriter with writer id")
    refusals = [line for line in traced.log if "RegisterTraceWriter with writer id" in line]
    assert len(refusals) == 1
    assert (
        f'"flood": RegisterTraceWriter with writer id {MAX_WRITER_ID + 1} refused' in (refusals[0])
    )
