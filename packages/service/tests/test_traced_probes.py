"""traced_probes as a user runs it: a subprocess on our traced's producer socket, recorded by a
consumer, the trace read with upstream's schema."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from perfetto_protos.common.sys_stats_counters_pb2 import MeminfoCounters
from perfetto_protos.config.trace_config_pb2 import TraceConfig
from perfetto_testing import TIMEOUT, NotifyingDaemon, wait_for
from traced_testlib import ConsumerSession, Traced

MEMINFO_MEM_TOTAL = MeminfoCounters.MEMINFO_MEM_TOTAL
MEMINFO_MEM_AVAILABLE = MeminfoCounters.MEMINFO_MEM_AVAILABLE
COMMAND = [str(Path(sys.executable).parent / "traced_probes")]  # the installed command
# The interpreter lives where uid 65534 cannot read: it drops to that uid once what it runs is
# imported (a module it then lacks fails like a data source that cannot run).
AS_NOBODY = [
    sys.executable,
    "-c",
    "import os, sys\n"
    "from perfetto_service.traced_probes import main\n"
    "import perfetto_probes.ps, perfetto_probes.sys_stats, perfetto_probes.system_info\n"
    "from perfetto_service.ipc.producer._producer_ipc_client import default_sdk_version\n"
    "default_sdk_version()\n"
    "os.setgroups([]); os.setgid(65534); os.setuid(65534)\n"
    "sys.exit(main())\n",
]


class TracedProbes(NotifyingDaemon):
    """A traced_probes subprocess (run from `cwd`), started once its data sources are
    registered."""

    def __init__(self, env: dict[str, str], cwd: Path, command: list[str] = COMMAND) -> None:
        env = dict(env)
        env.pop("TRACED_NOTIFY_FD", None)
        super().__init__(
            "traced_probes",
            command,
            env,
            "TRACED_PROBES_NOTIFY_FD",
            cwd=cwd,
            stdout=subprocess.DEVNULL,
        )


def _config(*names: str) -> TraceConfig:
    config = TraceConfig()
    config.buffers.add(size_kb=8192)
    for name in names:
        ds = config.data_sources.add().config
        ds.name = name
        if name == "linux.process_stats":
            ds.process_stats_config.scan_all_processes_on_start = True
            ds.process_stats_config.record_thread_names = True
            ds.process_stats_config.proc_stats_poll_ms = 100
        elif name == "linux.sys_stats":
            ds.sys_stats_config.meminfo_period_ms = 100
            ds.sys_stats_config.meminfo_counters.extend([MEMINFO_MEM_TOTAL, MEMINFO_MEM_AVAILABLE])
    return config


def _record(traced: Traced, config: TraceConfig, enough: Any) -> list[Any]:
    """Records until `enough(packets)` holds, then stops the session; every packet."""
    session = ConsumerSession(traced.consumer_socket)
    packets: list[Any] = []
    try:
        session.client.enable_tracing(config)

        def flushed_enough() -> bool:
            done = threading.Event()
            session.client.flush(2000, lambda _ok: done.set())
            assert done.wait(TIMEOUT)
            packets.extend(session.read_trace().packet)
            return bool(enough(packets))

        wait_for(flushed_enough, TIMEOUT)
        session.client.disable_tracing()
        assert session.wait_disabled() == ""
        packets.extend(session.read_trace().packet)
    finally:
        session.close()
    return packets


def _meminfo_kb(key: str) -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise AssertionError(key)


def _rss_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("VmRSS")


def test_process_tree_stats_counters_and_cpus_of_this_host(tmp_path: Path) -> None:
    stop = threading.Event()
    is_named = threading.Event()

    def run() -> None:  # the kernel's name of the thread (comm) is what /proc shows
        Path(f"/proc/self/task/{threading.get_native_id()}/comm").write_text("probes-test")
        is_named.set()
        stop.wait()

    named = threading.Thread(target=run)
    named.start()
    assert is_named.wait(TIMEOUT)
    try:
        with Traced(str(tmp_path)) as traced, TracedProbes(traced.env, tmp_path) as probes:
            packets = _record(
                traced,
                _config("linux.process_stats", "linux.sys_stats", "linux.system_info"),
                lambda ps: (
                    sum(p.HasField("sys_stats") for p in ps) >= 3
                    and any(p.HasField("process_stats") for p in ps)
                ),
            )
            rss_kb = _rss_kb()
    finally:
        stop.set()
        named.join()
    assert probes.process.returncode == 0 or probes.process.returncode is None
    trees = [p.process_tree for p in packets if p.HasField("process_tree")]
    processes = [proc for tree in trees for proc in tree.processes]
    pids = [proc.pid for proc in processes]
    assert len(pids) == len(set(pids)), "a process written twice"
    tids = [thread.tid for tree in trees for thread in tree.threads]
    assert len(tids) == len(set(tids)), "a thread written twice"
    mine = next(proc for proc in processes if proc.pid == os.getpid())
    cmdline = Path("/proc/self/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
    assert list(mine.cmdline) == [arg.decode() for arg in cmdline]
    assert (mine.ppid, mine.uid) == (os.getppid(), os.getuid())
    assert any(
        thread.tid == named.native_id
        and thread.tgid == os.getpid()
        and thread.name == "probes-test"
        for tree in trees
        for thread in tree.threads
    )
    stats = [
        proc for p in packets if p.HasField("process_stats") for proc in p.process_stats.processes
    ]
    my_rss = [proc.vm_rss_kb for proc in stats if proc.pid == os.getpid() and proc.vm_rss_kb]
    assert my_rss
    assert all(rss_kb / 2 <= rss <= rss_kb * 2 for rss in my_rss), (my_rss, rss_kb)
    sys_stats = [p.sys_stats for p in packets if p.HasField("sys_stats")]
    assert len(sys_stats) >= 3
    for sample in sys_stats:
        values = {entry.key: entry.value for entry in sample.meminfo}
        assert sorted(values) == [MEMINFO_MEM_TOTAL, MEMINFO_MEM_AVAILABLE]
        assert values[MEMINFO_MEM_TOTAL] == _meminfo_kb("MemTotal")
        assert 0 < values[MEMINFO_MEM_AVAILABLE] <= values[MEMINFO_MEM_TOTAL]
        assert not sample.vmstat
        assert not sample.cpu_stat
    stamps = [p.timestamp for p in packets if p.HasField("sys_stats")]
    assert stamps == sorted(stamps)
    assert len(set(stamps)) == len(stamps)
    cpu_infos = [p.cpu_info for p in packets if p.HasField("cpu_info")]
    assert len(cpu_infos) == 1
    assert len(cpu_infos[0].cpus) == os.cpu_count()
    sequences = {
        kind: {p.trusted_packet_sequence_id for p in packets if p.HasField(kind)}
        for kind in ("process_tree", "sys_stats", "cpu_info")
    }
    assert all(len(ids) == 1 for ids in sequences.values()), sequences
    assert len(set.union(*sequences.values())) == 3, "one sequence per data source instance"


@pytest.fixture
def directory() -> Iterator[Path]:
    """A socket directory uid 65534 can enter."""
    with tempfile.TemporaryDirectory() as path:
        os.chmod(path, 0o755)
        yield Path(path)


@pytest.mark.skipif(os.geteuid() != 0, reason="switching uid needs root")
def test_a_data_source_that_fails_leaves_the_others_recording(directory: Path) -> None:
    """As nobody, linux.ftrace cannot run (not installed, or tracefs not permitted): one line
    names it, and the session still records the others."""
    with Traced(str(directory)) as traced:
        os.chmod(traced.producer_socket, 0o666)
        with TracedProbes(traced.env, directory, AS_NOBODY) as probes:
            packets = _record(
                traced,
                _config("linux.ftrace", "linux.sys_stats", "linux.system_info"),
                lambda ps: sum(p.HasField("sys_stats") for p in ps) >= 2,
            )
            ftrace_lines = [line for line in probes.log if " linux.ftrace: " in line]
    assert len(ftrace_lines) == 1, probes.log
    assert " E " in ftrace_lines[0]
    assert sum(p.HasField("cpu_info") for p in packets) == 1
    assert not any("Traceback" in line for line in probes.log), probes.log


@pytest.mark.parametrize("ending", ["sigterm", "traced_exits"])
def test_traced_probes_ends_cleanly(tmp_path: Path, ending: str) -> None:
    with Traced(str(tmp_path)) as traced, TracedProbes(traced.env, tmp_path) as probes:
        session = ConsumerSession(traced.consumer_socket)
        try:
            session.client.enable_tracing(_config("linux.sys_stats", "linux.process_stats"))
            wait_for(lambda: sum("started" in line for line in probes.log) == 2, TIMEOUT)
        finally:
            session.close()
        if ending == "sigterm":
            probes.process.send_signal(signal.SIGTERM)
        else:
            assert traced.stop() == 0
        assert probes.wait() == 0, probes.log
    assert not any("Traceback" in line for line in probes.log), probes.log
    assert sum(" stopped" in line for line in probes.log) == 2, probes.log


def test_background_prints_the_daemons_pid_once_registered(tmp_path: Path) -> None:
    with Traced(str(tmp_path)) as traced:
        env = dict(traced.env)
        env.pop("TRACED_NOTIFY_FD", None)
        result = subprocess.run(
            [*COMMAND, "--background"],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            check=False,
        )
        assert (result.returncode, result.stderr) == (0, "")
        pid = int(result.stdout)
        try:
            session = ConsumerSession(traced.consumer_socket)
            try:
                session.wait_data_source("perfetto.traced_probes")
            finally:
                session.close()
        finally:
            os.kill(pid, signal.SIGTERM)
        wait_for(lambda: not Path(f"/proc/{pid}").exists() or _is_zombie(pid), TIMEOUT)


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z"
    except OSError:
        return True
