"""What the ftrace tests share: tracefs or a skip, a workload of two threads that switch, a
recording through FtraceDataSource, and ring-buffer pages captured to files."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from perfetto_probes import ProbesError
from perfetto_probes.ftrace import FtraceDataSource
from perfetto_probes.ftrace._formats import event_layout, page_layout, parse_format
from perfetto_probes.ftrace._page_parser import BundleWriter, EventLayout
from perfetto_probes.ftrace._tracefs import Instance, find_tracefs
from perfetto_protos.config.data_source_config_pb2 import DataSourceConfig
from perfetto_protos.upstream import upstream_message_class

_TracePacket = upstream_message_class("perfetto.protos.TracePacket")


def read_packet(data: bytes) -> Any:
    """A serialized TracePacket, read with upstream's schema."""
    return _TracePacket.FromString(data)


def tracefs_or_skip() -> Path:
    """The tracefs root, mounted if need be; skips the test with the reason where it cannot."""
    try:
        return find_tracefs()
    except ProbesError as exc:
        pytest.skip(f"no tracefs: {exc}")


class PingPong:
    """Two threads, each pinned to a CPU of its own where there are two, that wake each other
    `rounds` times through pipes: each round switches both out and in, under load too (each
    writes only once the other is blocked reading its pipe)."""

    def __init__(self, rounds: int) -> None:
        self.rounds = rounds
        self.tids: dict[str, int] = {}
        cpus = sorted(os.sched_getaffinity(0))
        self.cpus = [cpus[0], cpus[-1]]
        self._both = threading.Barrier(2)
        self._errors: list[BaseException] = []

    def _wait_until_blocked_reading(self, tid: int, fd: int) -> None:
        """Returns once thread `tid` sleeps in read(fd); a thread that is only preempted, or
        waits for the GIL, would not switch at the next write."""
        wanted = hex(fd)
        deadline = time.monotonic() + 30
        while True:
            fields = Path(f"/proc/self/task/{tid}/syscall").read_text().split()
            if fields[0] != "running" and len(fields) > 1 and fields[1] == wanted:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"thread {tid} never blocked reading fd {fd}")
            os.sched_yield()

    def _thread(self, comm: str, cpu: int, fds: tuple[int, int, int], first: bool) -> None:
        read_fd, write_fd, peer_read_fd = fds
        tid = threading.get_native_id()
        self.tids[comm] = tid
        Path(f"/proc/self/task/{tid}/comm").write_text(comm)
        os.sched_setaffinity(0, {cpu})
        self._both.wait()
        peer = self.tids["ppB" if comm == "ppA" else "ppA"]
        try:
            for _ in range(self.rounds):
                if not first:
                    os.read(read_fd, 1)
                self._wait_until_blocked_reading(peer, peer_read_fd)
                os.write(write_fd, b"x")
                if first:
                    os.read(read_fd, 1)
        except BaseException as exc:
            self._errors.append(exc)
            os.write(write_fd, b"x" * self.rounds)  # the other thread ends too

    def run(self) -> None:
        a_read, b_write = os.pipe()
        b_read, a_write = os.pipe()
        threads = [
            threading.Thread(
                target=self._thread, args=("ppA", self.cpus[0], (a_read, a_write, b_read), True)
            ),
            threading.Thread(
                target=self._thread, args=("ppB", self.cpus[1], (b_read, b_write, a_read), False)
            ),
        ]
        try:
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        finally:
            for fd in (a_read, b_write, b_read, a_write):
                os.close(fd)
        if self._errors:
            raise self._errors[0]


def ftrace_config(**fields: Any) -> DataSourceConfig:
    config = DataSourceConfig(name="linux.ftrace")
    compact = fields.pop("compact_sched", False)
    for name, value in fields.items():
        if isinstance(value, list):
            getattr(config.ftrace_config, name).extend(value)
        else:
            setattr(config.ftrace_config, name, value)
    config.ftrace_config.compact_sched.enabled = compact
    return config


def record(config: DataSourceConfig, workload: Callable[[], None]) -> list[Any]:
    """Starts linux.ftrace, runs `workload`, stops; the packets, read with upstream's schema."""
    tracefs_or_skip()
    packets: list[bytes] = []
    source = FtraceDataSource(config, packets.append)
    source.start()
    try:
        workload()
    finally:
        source.stop()
    return [read_packet(p) for p in packets]


def switches(packets: list[Any]) -> Iterator[tuple[int, int, int, str, int, str]]:
    """(cpu, timestamp, prev_pid, prev_comm, next_pid, next_comm) of each sched_switch event."""
    for packet in packets:
        if packet.HasField("ftrace_events"):
            bundle = packet.ftrace_events
            for event in bundle.event:
                if event.HasField("sched_switch"):
                    s = event.sched_switch
                    yield (
                        bundle.cpu,
                        event.timestamp,
                        s.prev_pid,
                        s.prev_comm,
                        s.next_pid,
                        s.next_comm,
                    )


def compact_switches(packets: list[Any]) -> Iterator[tuple[int, int, int, str]]:
    """(cpu, timestamp, next_pid, next_comm) of each switch in compact_sched."""
    for packet in packets:
        if packet.HasField("ftrace_events"):
            bundle = packet.ftrace_events
            compact = bundle.compact_sched
            ts = 0
            for delta, pid, index in zip(
                compact.switch_timestamp,
                compact.switch_next_pid,
                compact.switch_next_comm_index,
                strict=True,
            ):
                ts += delta
                yield bundle.cpu, ts, pid, compact.intern_table[index]


SCHED_EVENTS = ["sched/sched_switch", "sched/sched_waking"]


def capture(directory: Path, events: list[str], workload: Callable[[], None]) -> None:
    """Records `events` (group/name) in an instance of its own while `workload` runs, and
    saves the raw pages of each CPU (`cpuN.pages`) and the format files (`formats.json`)."""
    root = tracefs_or_skip()
    instance = Instance(root, f"perfetto_py_test_{os.getpid()}")
    instance.create()
    try:
        instance.configure(4096)
        formats: dict[str, Any] = {
            "header_page": (root / "events/header_page").read_text(),
            "header_event": (root / "events/header_event").read_text(),
            "events": {e: (root / "events" / e / "format").read_text() for e in events},
        }
        for event in events:
            group, name = event.split("/")
            assert instance.enable(group, name)
        instance.tracing_on(True)
        workload()
        instance.tracing_on(False)
        page_size = page_layout(
            formats["header_page"],
            formats["header_event"],
            parse_format(formats["events"][events[0]])[1],
        ).page_size
        for cpu_dir in sorted((instance.path / "per_cpu").iterdir()):
            fd = os.open(cpu_dir / "trace_pipe_raw", os.O_RDONLY | os.O_NONBLOCK)
            pages = bytearray()
            try:
                while True:
                    try:
                        data = os.read(fd, page_size)
                    except BlockingIOError:
                        break
                    if not data:
                        break
                    pages += data
            finally:
                os.close(fd)
            (directory / f"{cpu_dir.name}.pages").write_bytes(pages)
        (directory / "formats.json").write_text(json.dumps(formats))
    finally:
        instance.remove()


class Capture:
    """The pages and formats `capture` saved in a directory, with the layouts they give."""

    def __init__(self, directory: Path) -> None:
        formats = json.loads((directory / "formats.json").read_text())
        self.layouts: dict[int, EventLayout] = {}
        common = []
        for event, text in formats["events"].items():
            event_id, fields = parse_format(text)
            group, name = event.split("/")
            self.layouts[event_id] = event_layout(group, name, fields)
            common = fields
        self.page = page_layout(formats["header_page"], formats["header_event"], common)
        size = self.page.page_size
        self.pages: dict[int, list[bytes]] = {}
        for path in sorted(directory.glob("cpu*.pages")):
            data = path.read_bytes()
            self.pages[int(path.stem[3:])] = [
                data[offset : offset + size] for offset in range(0, len(data), size)
            ]

    def parse(self, compact: bool) -> list[bytes]:
        """The packets the page parser writes for these pages."""
        packets: list[bytes] = []
        for cpu, pages in self.pages.items():
            writer = BundleWriter(cpu, self.page, self.layouts, compact)
            for page in pages:
                writer.parse_page(page)
            packets += writer.take_packets()
        return packets


def parse_capture(directory: Path, compact: bool) -> list[bytes]:
    """The packets the page parser writes for the pages `capture` saved in `directory`."""
    return Capture(directory).parse(compact)
