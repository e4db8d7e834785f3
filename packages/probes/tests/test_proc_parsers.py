"""The /proc parsers on real files and on hostile input (cut short, not numbers, empty)."""

from __future__ import annotations

import os

from perfetto_probes.ps import parse_cmdline, parse_oom_score_adj, parse_status
from perfetto_probes.sys_stats import (
    MEMINFO_KEYS,
    VMSTAT_KEYS,
    parse_meminfo,
    parse_stat,
    parse_vmstat,
)
from perfetto_probes.system_info import parse_cpuinfo, parse_frequencies
from perfetto_protos.common import sys_stats_counters_pb2 as counters
from perfetto_protos.config.sys_stats.sys_stats_config_pb2 import SysStatsConfig
from perfetto_protos.trace.sys_stats.sys_stats_pb2 import SysStats

ALL_STAT = {1, 2, 3, 4}


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def test_this_process_status_gives_its_ids_and_memory() -> None:
    status = parse_status(_read(f"/proc/{os.getpid()}/status"))
    assert (status.pid, status.tgid, status.ppid, status.uid) == (
        os.getpid(),
        os.getpid(),
        os.getppid(),
        os.getuid(),
    )
    assert status.memory is not None
    assert 1000 < status.memory["vm_rss_kb"] < status.memory["vm_size_kb"]


def test_a_status_cut_short_keeps_the_complete_lines_only() -> None:
    data = _read(f"/proc/{os.getpid()}/status")
    cut = data[: data.index(b"PPid:") + 7]  # "PPid:\t1" of a longer number, or cut mid-line
    status = parse_status(cut)
    assert status.tgid == os.getpid()
    assert status.uid is None
    assert status.memory is None


def test_hostile_status_lines_are_left_out() -> None:
    status = parse_status(
        b"Name:\tweird: name\nTgid:\tx\nPid:\t\nVmSize:\t-5 kB\nVmRSS: 12\n\0\xff"
    )
    assert status.name == "weird: name"
    assert status.tgid is None
    assert status.pid is None
    assert status.memory is None  # no VmSize that is a number: not a process with memory
    assert parse_status(b"").tgid is None


def test_cmdline_with_and_without_its_last_nul() -> None:
    assert parse_cmdline(b"python3\0-c\0pass\0") == ["python3", "-c", "pass"]
    assert parse_cmdline(b"python3\0-c") == ["python3", "-c"]
    assert parse_cmdline(b"") == []
    assert parse_cmdline(b"\xff\0") == ["\ufffd"]


def test_oom_score_adj() -> None:
    assert parse_oom_score_adj(b"-1000\n") == -1000
    assert parse_oom_score_adj(b"") is None
    assert parse_oom_score_adj(b"12x") is None


def test_meminfo_selected_counters_match_proc_meminfo() -> None:
    data = _read("/proc/meminfo")
    keys = {b"MemTotal": counters.MEMINFO_MEM_TOTAL, b"Cached": counters.MEMINFO_CACHED}
    out = SysStats()
    assert parse_meminfo(data, keys, out) == 0
    assert [entry.key for entry in out.meminfo] == [
        counters.MEMINFO_MEM_TOTAL,
        counters.MEMINFO_CACHED,
    ]
    total = int(data.split(b"MemTotal:")[1].split()[0])
    assert out.meminfo[0].value == total
    out = SysStats()
    assert parse_meminfo(data, MEMINFO_KEYS, out) == 0
    assert len(out.meminfo) >= 20


def test_hostile_meminfo_and_vmstat_count_their_bad_lines() -> None:
    out = SysStats()
    data = b"MemTotal: \nMemFree: x kB\nCached 5\nBuffers: 7 kB\nMemAv"
    assert parse_meminfo(data, MEMINFO_KEYS, out) == 4
    assert [(entry.key, entry.value) for entry in out.meminfo] == [(counters.MEMINFO_BUFFERS, 7)]
    out = SysStats()
    assert (
        parse_vmstat(b"nr_free_pages\npgfault 9\npgmajfault -1x\nnr_dirty 3", VMSTAT_KEYS, out) == 2
    )
    assert [(entry.key, entry.value) for entry in out.vmstat] == [
        (counters.VMSTAT_PGFAULT, 9),
        (counters.VMSTAT_NR_DIRTY, 3),
    ]


def test_vmstat_names_are_upstreams() -> None:
    assert VMSTAT_KEYS[b"nr_free_pages"] == counters.VMSTAT_NR_FREE_PAGES
    assert VMSTAT_KEYS[b"swap_ra_hit"] == counters.VMSTAT_SWAP_RA_HIT
    out = SysStats()
    assert parse_vmstat(_read("/proc/vmstat"), VMSTAT_KEYS, out) == 0
    assert any(entry.key == counters.VMSTAT_PGFAULT for entry in out.vmstat)


def test_stat_gives_each_cpu_forks_and_interrupts() -> None:
    out = SysStats()
    assert parse_stat(_read("/proc/stat"), ALL_STAT, 10_000_000, out) == 0
    assert [cpu.cpu_id for cpu in out.cpu_stat] == list(range(os.cpu_count() or 0))
    assert all(cpu.idle_ns % 10_000_000 == 0 for cpu in out.cpu_stat)
    assert out.num_forks > 0
    assert out.num_irq_total > 0
    assert len(out.num_softirq) == 10  # the kernel's softirq kinds


def test_stat_honours_the_selected_counters() -> None:
    out = SysStats()
    parse_stat(_read("/proc/stat"), {SysStatsConfig.STAT_FORK_COUNT}, 1, out)
    assert out.num_forks > 0
    assert not out.cpu_stat
    assert not out.num_irq
    assert not out.HasField("num_irq_total")


def test_hostile_stat_counts_its_bad_lines() -> None:
    out = SysStats()
    data = b"cpu 1 2 3 4\ncpu0 1 2\ncpuX 1 2 3 4\ncpu1 1 2 3 4 5 6 7 8 9 10\nintr\nprocesses x\n"
    assert parse_stat(data, ALL_STAT, 2, out) == 4
    assert [(cpu.cpu_id, cpu.user_ns, cpu.steal_ns) for cpu in out.cpu_stat] == [(1, 2, 16)]
    assert not out.HasField("num_forks")


def test_cpuinfo_one_cpu_per_processor_block() -> None:
    cpus = parse_cpuinfo(_read("/proc/cpuinfo").decode())
    assert [cpu.index for cpu in cpus] == list(range(len(cpus)))
    assert len(cpus) == os.cpu_count()
    arm = "processor\t: 0\nBogoMIPS : 1\n\nprocessor\t: 1\n\nProcessor\t: AArch64 rev 4\nproc"
    assert [(cpu.index, cpu.processor) for cpu in parse_cpuinfo(arm)] == [
        (0, "AArch64 rev 4"),
        (1, "AArch64 rev 4"),
    ]
    assert parse_cpuinfo("processor : x\n") == []


def test_frequencies_of_both_sysfs_forms() -> None:
    assert parse_frequencies("300000 600000 \n", first_column=False) == [300000, 600000]
    assert parse_frequencies("300000 12\n600000 7\nbad 1\n", first_column=True) == [300000, 600000]
