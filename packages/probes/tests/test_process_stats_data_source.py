"""linux.process_stats on this machine's /proc and on a /proc whose processes vanish or whose
files are cut short: what vanished is counted, never a crash."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

from perfetto_probes import data_source_factory
from perfetto_probes.ps import ProcessStatsDataSource
from perfetto_protos.config.data_source_config_pb2 import DataSourceConfig
from perfetto_protos.config.process_stats.process_stats_config_pb2 import ProcessStatsConfig
from perfetto_protos.trace.ps.process_tree_pb2 import ProcessTree
from perfetto_protos.trace.trace_packet_pb2 import TracePacket


def _config(**fields: object) -> DataSourceConfig:
    config = DataSourceConfig(name="linux.process_stats")
    for name, value in fields.items():
        setattr(config.process_stats_config, name, value)
    return config


class Sink:
    def __init__(self) -> None:
        self.packets: list[TracePacket] = []

    def __call__(self, data: bytes) -> None:
        self.packets.append(TracePacket.FromString(data))

    def processes(self) -> list[ProcessTree.Process]:
        return [p for packet in self.packets for p in packet.process_tree.processes]

    def threads(self) -> list[ProcessTree.Thread]:
        return [t for packet in self.packets for t in packet.process_tree.threads]


def test_the_factory_is_registered_under_upstreams_name() -> None:
    assert data_source_factory("linux.process_stats") is ProcessStatsDataSource


def named_thread(name: str, done: threading.Event) -> threading.Thread:
    """A running thread whose kernel name (comm) is `name`."""
    named = threading.Event()

    def run() -> None:
        Path(f"/proc/self/task/{threading.get_native_id()}/comm").write_text(name)
        named.set()
        done.wait()

    thread = threading.Thread(target=run)
    thread.start()
    assert named.wait(10)
    return thread


def test_the_tree_at_start_holds_this_process_and_a_named_thread_once() -> None:
    done = threading.Event()
    thread = named_thread("probes-named", done)
    try:
        sink = Sink()
        source = ProcessStatsDataSource(
            _config(scan_all_processes_on_start=True, record_thread_names=True), sink
        )
        source.start()
    finally:
        done.set()
        thread.join()
    mine = [p for p in sink.processes() if p.pid == os.getpid()]
    assert len(mine) == 1
    argv = Path("/proc/self/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
    assert list(mine[0].cmdline) == [arg.decode() for arg in argv]
    assert mine[0].ppid == os.getppid()
    assert mine[0].uid == os.getuid()
    threads = [t for t in sink.threads() if t.tgid == os.getpid()]
    assert any(t.tid == thread.native_id and t.name == "probes-named" for t in threads)
    tids = [t.tid for t in sink.threads()]
    assert len(tids) == len(set(tids))
    assert len({p.pid for p in sink.processes()}) == len(sink.processes())
    assert all(p.timestamp > 0 for p in sink.packets)


def test_on_pids_writes_a_process_and_thread_once() -> None:
    sink = Sink()
    source = ProcessStatsDataSource(_config(), sink)
    source.start()
    assert sink.packets == []
    source.on_pids({threading.get_native_id(), os.getpid()})
    source.on_pids({threading.get_native_id()})
    assert [p.pid for p in sink.processes()] == [os.getpid()]
    assert [t.tid for t in sink.threads()] == [os.getpid()]


def test_the_disable_on_demand_quirk_ignores_seen_pids() -> None:
    sink = Sink()
    config = _config()
    config.process_stats_config.quirks.append(ProcessStatsConfig.DISABLE_ON_DEMAND)
    source = ProcessStatsDataSource(config, sink)
    source.on_pids({os.getpid()})
    assert sink.packets == []


def test_a_process_that_exited_is_counted_not_written() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    sink = Sink()
    source = ProcessStatsDataSource(_config(), sink)
    source.on_pids({child.pid})
    assert sink.packets == []
    assert source.errors.vanished == 1


def _fake_proc(root: Path, pid: int, status: bytes, cmdline: bytes = b"prog\0") -> None:
    directory = root / str(pid)
    (directory / "task" / str(pid)).mkdir(parents=True)
    (directory / "status").write_bytes(status)
    (directory / "cmdline").write_bytes(cmdline)
    (directory / "oom_score_adj").write_bytes(b"0\n")


def test_a_hostile_proc_counts_what_it_leaves_out(tmp_path: Path) -> None:
    _fake_proc(
        tmp_path,
        10,
        b"Name:\tok\nTgid:\t10\nPid:\t10\nPPid:\t1\nUid:\t0\t0\t0\t0\n"
        b"VmSize:\t100 kB\nVmRSS:\t50 kB\n",
    )
    _fake_proc(tmp_path, 11, b"Name:\tcut\nTgid:\t1")  # cut short before its Pid line
    (tmp_path / "12").mkdir()  # exited: its directory listed, its files gone
    _fake_proc(tmp_path, 13, b"Name:\tkthread\nTgid:\t13\nPid:\t13\nPPid:\t2\n", cmdline=b"")
    sink = Sink()
    source = ProcessStatsDataSource(
        _config(
            scan_all_processes_on_start=True, proc_stats_poll_ms=100, proc_stats_cache_ttl_ms=200
        ),
        sink,
        str(tmp_path),
    )
    source.start()
    assert [(p.pid, list(p.cmdline), p.cmdline_is_comm) for p in sink.processes()] == [
        (10, ["prog"], False),
        (13, ["kthread"], True),
    ]
    assert (source.errors.vanished, source.errors.malformed) == (1, 1)
    sink.packets.clear()
    next_ns = source.poll(1_000_000_050)
    assert next_ns == 1_100_000_000
    stats = [p for packet in sink.packets for p in packet.process_stats.processes]
    assert [(p.pid, p.vm_rss_kb, p.vm_size_kb) for p in stats] == [(10, 50, 100), (13, 0, 0)]
    sink.packets.clear()
    source.poll(next_ns)  # nothing changed: nothing written
    assert sink.packets == []
    source.poll(next_ns + 100_000_000)  # the cache lived two polls: everything again
    assert [p.pid for packet in sink.packets for p in packet.process_stats.processes] == [10, 13]


def test_a_host_writes_its_own_process_with_the_thread_names_it_knows() -> None:
    done = threading.Event()
    thread = named_thread("kernel-name", done)
    try:
        assert thread.native_id is not None
        tid = thread.native_id
        sink = Sink()
        source = ProcessStatsDataSource(_config(record_thread_names=True), sink)
        source.thread_names = lambda pid, t: "host-name" if t == tid else None
        source.write_process_tree([os.getpid()])
        source.write_process_tree([os.getpid()])  # written once
    finally:
        done.set()
        thread.join()
    assert [p.pid for p in sink.processes()] == [os.getpid()]
    names = {t.tid: t.name for t in sink.threads()}
    assert len(names) == len(sink.threads())
    assert names[tid] == "host-name"
    assert names[os.getpid()] == Path("/proc/self/comm").read_text().strip()
