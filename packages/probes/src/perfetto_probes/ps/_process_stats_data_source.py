"""`linux.process_stats`: the process tree, and per-process memory counters at a period."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from perfetto_protos.config.data_source_config_pb2 import DataSourceConfig
from perfetto_protos.config.process_stats.process_stats_config_pb2 import ProcessStatsConfig
from perfetto_protos.trace.ps.process_stats_pb2 import ProcessStats
from perfetto_protos.trace.ps.process_tree_pb2 import ProcessTree
from perfetto_protos.trace.trace_packet_pb2 import TracePacket

from perfetto_probes._data_source import PacketSink
from perfetto_probes._procfs import VANISHED, boottime_ns, numeric_entries, read_proc_file
from perfetto_probes.ps._proc_parsers import (
    ProcStatus,
    parse_cmdline,
    parse_oom_score_adj,
    parse_status,
)

__all__ = ["MIN_POLL_MS", "ProcessStatsDataSource", "ProcessStatsErrors"]

_log = logging.getLogger("perfetto_probes")

MIN_POLL_MS = 100
"""The shortest proc_stats_poll_ms honoured (upstream's); shorter periods become this."""
_ENTRIES_PER_PACKET = 256


@dataclass
class ProcessStatsErrors:
    """What could not be recorded, counted where it was lost."""

    vanished: int = 0
    """/proc files whose process exited while they were read (the process is left out)."""
    unreadable: int = 0
    """/proc files that could not be read for another reason (e.g. permissions)."""
    malformed: int = 0
    """status files without the lines a process needs (cut short or not a process)."""


class ProcessStatsDataSource:
    """One `linux.process_stats` instance (a `ProbesDataSource`).

    Writes the process tree at start with `scan_all_processes_on_start`, each process and
    thread once per instance; `on_pids` adds those seen elsewhere (by ftrace) as they appear,
    unless the config has the DISABLE_ON_DEMAND quirk;
    every `proc_stats_poll_ms`, ProcessStats with each process's memory counters that changed
    since it was last written (all of them again every `proc_stats_cache_ttl_ms`).

    `thread_names(pid, tid)`, when the host sets it, names threads that /proc knows only by
    their comm (`perfetto-trace run --sched`: its Python threads' `threading` names); where it
    returns None, the comm.
    """

    def __init__(self, config: DataSourceConfig, sink: PacketSink, proc: str = "/proc") -> None:
        ps_config = config.process_stats_config
        self._sink = sink
        self._proc = proc
        self._scan_on_start = ps_config.scan_all_processes_on_start
        self._thread_names = ps_config.record_thread_names
        self._on_demand = ProcessStatsConfig.DISABLE_ON_DEMAND not in ps_config.quirks
        poll_ms = ps_config.proc_stats_poll_ms
        if 0 < poll_ms < MIN_POLL_MS:
            _log.info(
                "proc_stats_poll_ms %d is below %d ms: polling every %d ms",
                poll_ms,
                MIN_POLL_MS,
                MIN_POLL_MS,
            )
            poll_ms = MIN_POLL_MS
        self._poll_ns = poll_ms * 1_000_000
        self._cache_ttl_ticks = (
            max(ps_config.proc_stats_cache_ttl_ms // poll_ms, 1) if poll_ms else 1
        )
        self._ticks = 0
        self._seen: set[int] = set()
        self._cache: dict[int, dict[str, int]] = {}
        self.errors = ProcessStatsErrors()
        self.thread_names: Callable[[int, int], str | None] | None = None

    # ProbesDataSource.

    def start(self) -> None:
        if self._scan_on_start:
            self._write_tree(self._all_pids(), with_threads=True)

    def poll(self, now_ns: int) -> int | None:
        if not self._poll_ns:
            return None
        self._write_stats()
        return now_ns + self._poll_ns - now_ns % self._poll_ns

    def flush(self) -> None:
        """Everything is written as it is read."""

    def stop(self) -> None:
        errors = self.errors
        if errors.vanished or errors.unreadable or errors.malformed:
            _log.info(
                "linux.process_stats: left out %d processes that exited while read, %d /proc "
                "files that could not be read, %d malformed status files",
                errors.vanished,
                errors.unreadable,
                errors.malformed,
            )

    # From ftrace.

    def on_pids(self, pids: set[int]) -> None:
        """Writes the processes and threads among `pids` (thread ids) not written yet (nothing
        with the DISABLE_ON_DEMAND quirk)."""
        if self._on_demand:
            self._write_tree(sorted(pids - self._seen), with_threads=False)

    def write_process_tree(self, pids: list[int]) -> None:
        """Writes the processes `pids` with every thread they have now (those not written
        yet), as `scan_all_processes_on_start` writes every process."""
        self._write_tree(pids, with_threads=True)

    # The process tree.

    def _thread_name(self, pid: int, tid: int, comm: str | None) -> str:
        name = self.thread_names(pid, tid) if self.thread_names is not None else None
        return name if name is not None else comm or ""

    def _all_pids(self) -> list[int]:
        return numeric_entries(self._proc)

    def _read(self, pid: int, name: str) -> bytes | None:
        try:
            return read_proc_file(f"{self._proc}/{pid}/{name}")
        except OSError as exc:
            if exc.errno in VANISHED:
                self.errors.vanished += 1
            else:
                self.errors.unreadable += 1
            return None

    def _status(self, pid: int) -> ProcStatus | None:
        data = self._read(pid, "status")
        if data is None:
            return None
        status = parse_status(data)
        if status.tgid is None or status.pid != pid:
            self.errors.malformed += 1
            return None
        return status

    def _write_tree(self, pids: list[int], *, with_threads: bool) -> None:
        tree = ProcessTree()
        for pid in pids:
            if pid <= 0 or pid in self._seen:
                continue
            status = self._status(pid)
            if status is None:
                continue
            tgid = status.tgid
            assert tgid is not None
            if tgid not in self._seen:
                process_status = status if tgid == pid else self._status(tgid)
                if process_status is None or not self._add_process(tree, tgid, process_status):
                    continue
                if with_threads:
                    self._add_threads(tree, tgid)
            if pid not in self._seen:
                tree.threads.add(tid=pid, tgid=tgid, name=self._thread_name(tgid, pid, status.name))
                self._seen.add(pid)
            if len(tree.processes) + len(tree.threads) >= _ENTRIES_PER_PACKET:
                self._emit_tree(tree)
                tree = ProcessTree()
        if tree.processes or tree.threads:
            self._emit_tree(tree)

    def _add_process(self, tree: ProcessTree, pid: int, status: ProcStatus) -> bool:
        cmdline_data = self._read(pid, "cmdline")
        if cmdline_data is None:
            return False
        process = tree.processes.add(pid=pid, ppid=status.ppid or 0, uid=status.uid or 0)
        cmdline = parse_cmdline(cmdline_data)
        if cmdline:
            process.cmdline.extend(cmdline)
        else:  # a kernel thread or a zombie: its name instead
            process.cmdline.append(status.name or "")
            process.cmdline_is_comm = True
        self._seen.add(pid)
        tree.threads.add(tid=pid, tgid=pid, name=self._thread_name(pid, pid, status.name))
        return True

    def _add_threads(self, tree: ProcessTree, pid: int) -> None:
        for tid in numeric_entries(f"{self._proc}/{pid}/task"):
            if tid == pid or tid in self._seen:
                continue
            thread = tree.threads.add(tid=tid, tgid=pid)
            name = self.thread_names(pid, tid) if self.thread_names is not None else None
            if name is not None:
                thread.name = name
            elif self._thread_names:
                try:
                    data = read_proc_file(f"{self._proc}/{pid}/task/{tid}/status")
                except OSError as exc:
                    if exc.errno in VANISHED:
                        self.errors.vanished += 1
                    else:
                        self.errors.unreadable += 1
                    del tree.threads[-1]
                    continue
                thread.name = parse_status(data).name or ""
            self._seen.add(tid)

    def _emit_tree(self, tree: ProcessTree) -> None:
        tree.collection_end_timestamp = now = boottime_ns()
        self._sink(TracePacket(timestamp=now, process_tree=tree).SerializeToString())

    # ProcessStats.

    def _write_stats(self) -> None:
        stats = ProcessStats()
        pids = self._all_pids()
        for pid in pids:
            status = self._status(pid)
            if status is None:
                continue
            cached = self._cache.setdefault(pid, {})
            changed = {}
            if status.memory is not None:
                changed = {k: v for k, v in status.memory.items() if cached.get(k) != v}
            oom_data = self._read(pid, "oom_score_adj")
            oom = None if oom_data is None else parse_oom_score_adj(oom_data)
            if oom is not None and cached.get("oom_score_adj") != oom:
                changed["oom_score_adj"] = oom
            if changed:
                stats.processes.add(pid=pid, **changed)
                cached.update(changed)
            if len(stats.processes) >= _ENTRIES_PER_PACKET:
                self._emit_stats(stats)
                stats = ProcessStats()
        if stats.processes:
            self._emit_stats(stats)
        self._ticks += 1
        if self._ticks >= self._cache_ttl_ticks:
            self._ticks = 0
            self._cache.clear()
        # Processes that appeared since the start get into the tree once, as upstream.
        self._write_tree([pid for pid in pids if pid not in self._seen], with_threads=False)

    def _emit_stats(self, stats: ProcessStats) -> None:
        stats.collection_end_timestamp = now = boottime_ns()
        self._sink(TracePacket(timestamp=now, process_stats=stats).SerializeToString())
