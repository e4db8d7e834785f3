"""`perfetto-trace run --sched`: the scheduling of every CPU (linux.ftrace) and the processes
and threads it names (linux.process_stats), recorded in-process by a thread of its own into the
recording's trace file, on a trusted packet sequence of its own."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

from perfetto_probes import ProbesDataSource, ProbesError
from perfetto_probes.ftrace import FtraceDataSource
from perfetto_probes.ps import ProcessStatsDataSource
from perfetto_protos.config.data_source_config_pb2 import DataSourceConfig
from perfetto_protos.trace.ftrace.ftrace_stats_pb2 import FtraceStats
from perfetto_protos.trace.ps.process_tree_pb2 import ProcessTree
from perfetto_protos.trace.trace_packet_pb2 import TracePacket

from perfetto_client._tracer import _packets
from perfetto_client._tracer._sink import Sink

__all__ = ["SCHED_EVENTS", "SchedRecorder"]

SCHED_EVENTS = (
    "sched/sched_switch",
    "sched/sched_waking",
    "task/task_newtask",
    "task/task_rename",
    "sched/sched_process_exit",
    "sched/sched_process_free",
)
"""The ftrace events `--sched` records: what upstream's UI derives thread states from."""
_LOST_COUNTERS = ("overrun", "commit_overrun", "dropped_events")
"""The per-CPU counters of events the kernel dropped or overwrote before they were read."""


def _boottime_ns() -> int:
    return time.clock_gettime_ns(time.CLOCK_BOOTTIME)


class SchedRecorder:
    """Runs linux.ftrace (compact_sched) and linux.process_stats for one recording.

    `start()` sets them up in the calling thread (raising ProbesError, one line, where tracefs
    cannot be used) and writes this process with its threads, named by `thread_name(tid)`; a
    thread then polls them at the deadlines they ask for and writes what they read, one batch
    per poll, into `sink`; `stop()` drains, writes the FtraceStats of the end, and restores
    tracefs. `summary()` says what was recorded and lost.
    """

    def __init__(
        self,
        sink: Sink,
        sequence_id: int,
        thread_name: Callable[[int], str | None],
        on_write_error: Callable[[OSError], None],
    ) -> None:
        self._sink = sink
        self._on_write_error = on_write_error
        self._sequence_id = sequence_id
        self._packets: list[bytes] = []
        ftrace_config = DataSourceConfig(name="linux.ftrace")
        ftrace_config.ftrace_config.ftrace_events.extend(SCHED_EVENTS)
        ftrace_config.ftrace_config.compact_sched.enabled = True
        self.ftrace = FtraceDataSource(ftrace_config, self._packets.append)
        ps_config = DataSourceConfig(name="linux.process_stats")
        ps_config.process_stats_config.record_thread_names = True
        self.process_stats = ProcessStatsDataSource(ps_config, self._packets.append)
        self._pid = os.getpid()
        self._thread_name = thread_name
        self.process_stats.thread_names = lambda pid, tid: (
            thread_name(tid) if pid == self._pid else None
        )
        self._routed: set[int] = set()  # the threads described so far
        self._unnamed: set[int] = set()  # this process's threads waiting for their names
        self._forked = False  # in a forked child of the process that started it
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._events_written = 0  # ftrace events handed to the sink so far
        self.events_not_written = 0
        """ftrace events in batches the sink dropped (the size cap, a write error)."""
        self.error: BaseException | None = None
        """What ended the polling thread early, if anything (its reads stopped there)."""

    def start(self) -> None:
        """Sets tracefs up, writes this process's tree and starts polling."""
        self.ftrace.start()
        _running.add(self)
        try:
            self.process_stats.start()
            self.process_stats.write_process_tree([self._pid])
            self._routed.update(int(tid) for tid in os.listdir(f"/proc/{self._pid}/task"))
            self._write()
        except BaseException:
            _running.discard(self)
            self.ftrace.stop()
            raise
        self._thread = threading.Thread(target=self._run, name="perfetto-trace sched", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        sources: list[ProbesDataSource] = [self.ftrace, self.process_stats]
        deadlines: list[int | None] = [_boottime_ns()] * len(sources)
        try:
            while True:
                due = [d for d in deadlines if d is not None]
                if not due or self._stopping.wait(max(min(due) - _boottime_ns(), 0) / 1e9):
                    return
                now = _boottime_ns()
                for i, source in enumerate(sources):
                    deadline = deadlines[i]
                    if deadline is not None and deadline <= now:
                        deadlines[i] = source.poll(now)
                self._route_pids()
                self._write()
        except BaseException as exc:  # reported in the summary; stop() still restores tracefs
            self.error = exc

    def stop(self) -> None:
        """Stops polling, writes the last events and the FtraceStats of the end, and removes
        the ftrace instance."""
        _running.discard(self)
        self._stopping.set()
        if self._thread is not None:
            self._thread.join()
        if self._forked:
            return
        try:
            self.ftrace.stop()
        except ProbesError as exc:
            self.error = self.error or exc
        self._route_pids(final=True)
        self.process_stats.stop()
        self._write()

    def forget_after_fork(self) -> None:
        """In a forked child: the parent's ftrace instance is the parent's to read and remove;
        the child closes its copies of the ring buffers' files and writes nothing."""
        self._forked = True
        for cpu in self.ftrace.cpus:
            os.close(cpu.fd)
        self.ftrace.cpus = []
        self.ftrace.instance = None

    def _route_pids(self, final: bool = False) -> None:
        """Describes the threads ftrace saw: this process's by their `threading` names (also
        those that have exited since), the others through process_stats. One of this
        process's without a name yet (it is starting) waits for the next poll, unless
        `final`."""
        pids = (self.ftrace.take_seen_pids() - self._routed) | self._unnamed
        own: dict[int, str] = {}
        self._unnamed = set()
        for tid in pids:
            name = self._thread_name(tid)
            if name is not None:
                own[tid] = name
            elif not final and os.path.exists(f"/proc/{self._pid}/task/{tid}"):
                self._unnamed.add(tid)
        others = pids - own.keys() - self._unnamed
        self._routed |= own.keys() | others
        if own:
            tree = ProcessTree()
            for tid, name in sorted(own.items()):
                tree.threads.add(tid=tid, tgid=self._pid, name=name)
            tree.collection_end_timestamp = now = _boottime_ns()
            self._packets.append(TracePacket(timestamp=now, process_tree=tree).SerializeToString())
        if others:
            self.process_stats.on_pids(others)

    def _write(self) -> None:
        """Hands the packets read since the last call to the sink as one batch."""
        packets = self._packets[:]
        del self._packets[:]
        events = self.ftrace.events_read - self._events_written
        self._events_written += events
        if not packets:
            return
        data = b"".join(_packets.framed(p, self._sequence_id) for p in packets)
        written = False
        try:
            written = self._sink.write(data, 0)
        except OSError as exc:
            self._on_write_error(exc)
        finally:
            if not written:
                self.events_not_written += events

    def summary(self) -> str:
        """What was recorded and lost, as the run's summary says it ("" in a forked child:
        the parent's summary says it)."""
        if self._forked:
            return ""
        ftrace = self.ftrace
        start = ftrace.cpu_stats.get(FtraceStats.START_OF_TRACE, {})
        end = ftrace.cpu_stats.get(FtraceStats.END_OF_TRACE, {})
        overwritten = sum(
            end[cpu].get(name, 0) - start.get(cpu, {}).get(name, 0)
            for cpu in end
            for name in _LOST_COUNTERS
        )
        reasons = []
        if overwritten:
            reasons.append(
                f"{overwritten:,} overwritten in the kernel's ring buffers before they were read"
            )
        if self.events_not_written:
            reasons.append(f"{self.events_not_written:,} not written to the trace file")
        if self.error is not None:
            reasons.append(f"reading stopped early: {self.error}")
        if ftrace.parse_errors:
            reasons.append("pages that could not be read (FtraceStats.ftrace_parse_errors)")
        lost = overwritten + self.events_not_written
        count = f"{lost:,} lost ({'; '.join(reasons)})" if reasons else "0 lost"
        cpus = len(end) or len(start)
        return (
            f"scheduling: {ftrace.events_read:,} ftrace events from {cpus} CPUs "
            f"(every thread of the machine), {count}"
        )


_running: set[SchedRecorder] = set()


def _forget_in_child() -> None:
    for recorder in _running:
        recorder.forget_after_fork()
    _running.clear()


os.register_at_fork(after_in_child=_forget_in_child)
