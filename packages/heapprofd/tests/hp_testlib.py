"""Helpers for heapprofd's tests: traced and the daemon on private sockets, targets, traces."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from heapprofd._errors import HeapprofdError
from heapprofd._heap_profile import trace_config, traced_command
from heapprofd._recorder import Recorder
from perfetto_protos.config.trace_config_pb2 import TraceConfig
from perfetto_protos.upstream import parse_upstream_trace
from perfetto_testing import TIMEOUT, NotifyingDaemon, wait_for

HERE = Path(__file__).resolve().parent
TARGET = str(HERE / "target_main.py")
KEPT_BYTES = 10240 * (1000 + 1 + 56)
"""What target_main.py's `keep` keeps: 10240 bytearrays, the object and its 1001-byte buffer."""


class Stack:
    """traced and heapprofd running on sockets under `directory`; both logs are collected
    (a pipe nobody reads would block the daemon once full)."""

    def __init__(self, directory: str) -> None:
        self.env = dict(os.environ)
        self.env["PERFETTO_PRODUCER_SOCK_NAME"] = f"{directory}/producer"
        self.env["PERFETTO_CONSUMER_SOCK_NAME"] = self.consumer = f"{directory}/consumer"
        self.env["PERFETTO_HEAPPROFD_SOCK_NAME"] = self.heapprofd_socket = f"{directory}/hp"
        self._traced = NotifyingDaemon(
            "traced", traced_command(), self.env, "TRACED_NOTIFY_FD", stdout=None
        )
        try:
            self._heapprofd = NotifyingDaemon(
                "heapprofd",
                [sys.executable, "-m", "heapprofd"],
                self.env,
                "HEAPPROFD_NOTIFY_FD",
                stdout=None,
            )
        except BaseException:
            self._traced.close()
            raise
        self.daemon = self._heapprofd.process

    @property
    def daemon_log(self) -> str:
        return "".join(f"{line}\n" for line in self._heapprofd.log)

    def logs(self) -> str:
        """The last lines of both daemons' logs, for a failure's message."""
        return "\n".join(
            f"--- {daemon.name}'s log:\n" + "\n".join(daemon.log[-40:])
            for daemon in (self._traced, self._heapprofd)
        )

    def close(self) -> None:
        for daemon in (self._heapprofd, self._traced):
            daemon.close()


class Target:
    """A Python program (target_main.py) driven by commands on its stdin."""

    def __init__(self, env: dict[str, str], *args: str, startup: bool = False) -> None:
        argv = [sys.executable, TARGET, *args]
        if startup:
            argv = [sys.executable, "-m", "heapprofd", "run", "--", TARGET, *args]
        self.process = subprocess.Popen(
            argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        try:
            self.expect("READY")
        except BaseException:
            self.process.kill()
            self.process.wait()
            raise

    @property
    def pid(self) -> int:
        return self.process.pid

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.strip())

    def expect(self, prefix: str) -> str:
        start = len(self.lines)
        found: list[str] = []

        def seen() -> bool:
            found.extend(line for line in self.lines[start:] if line.startswith(prefix))
            return bool(found)

        wait_for(seen)
        return found[0]

    def command(self, command: str, reply: str) -> str:
        assert self.process.stdin is not None
        start = len(self.lines)
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        result: list[str] = []

        def seen() -> bool:
            result.extend(line for line in self.lines[start:] if line.startswith(reply))
            return bool(result)

        wait_for(seen)
        return result[0]

    def close(self) -> None:
        if self.process.poll() is None:
            assert self.process.stdin is not None
            try:
                self.process.stdin.close()
                self.process.wait(TIMEOUT)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait()
        self._reader.join(TIMEOUT)
        if self.process.stdout is not None:
            self.process.stdout.close()


@dataclass
class HeapDump:
    """One ProcessHeapSamples with its callstacks resolved to (function, file, line) frames."""

    pid: int
    heap_name: str
    flags: dict[str, Any]
    heap_samples: int
    samples: list[tuple[list[tuple[str, str, int]], dict[str, int]]] = field(default_factory=list)

    def totals(self, function: str) -> dict[str, int]:
        """Summed totals of the callstacks that contain `function`."""
        out: dict[str, int] = defaultdict(int)
        for stack, values in self.samples:
            if any(frame[0] == function for frame in stack):
                for key, value in values.items():
                    out[key] += value
        return dict(out)


def heap_dumps(trace: bytes) -> list[HeapDump]:
    """Every heap dump in `trace`, parsed with upstream's schema."""
    parsed: Any = parse_upstream_trace(trace)
    strings: dict[tuple[int, int], str] = {}
    mappings: dict[tuple[int, int], str] = {}
    frames: dict[tuple[int, int], tuple[str, str, int]] = {}
    stacks: dict[tuple[int, int], list[tuple[str, str, int]]] = {}
    dumps: list[HeapDump] = []
    for packet in parsed.packet:
        if not packet.HasField("profile_packet"):
            continue
        seq = packet.trusted_packet_sequence_id
        profile = packet.profile_packet
        for s in profile.strings:
            strings[seq, s.iid] = s.str.decode()
        for m in profile.mappings:
            mappings[seq, m.iid] = "/" + "/".join(strings[seq, i] for i in m.path_string_ids)
        for f in profile.frames:
            # a native frame has no source path: its mapping's path stands for it
            frames[seq, f.iid] = (
                strings.get((seq, f.function_name_id), ""),
                strings.get((seq, f.source_path_iid)) or mappings[seq, f.mapping_id],
                f.line_number,
            )
        for c in profile.callstacks:
            stacks[seq, c.iid] = [frames[seq, i] for i in c.frame_ids]
        for d in profile.process_dumps:
            flags = {
                name: getattr(d, name)
                for name in (
                    "from_startup",
                    "rejected_concurrent",
                    "disconnected",
                    "buffer_overran",
                    "buffer_corrupted",
                    "hit_guardrail",
                )
            }
            dump = HeapDump(d.pid, d.heap_name, flags, d.stats.heap_samples)
            for s in d.samples:
                dump.samples.append(
                    (
                        stacks[seq, s.callstack_id],
                        {
                            "allocated": s.self_allocated,
                            "freed": s.self_freed,
                            "alloc_count": s.alloc_count,
                            "free_count": s.free_count,
                            "max": s.self_max,
                        },
                    )
                )
            dumps.append(dump)
    return dumps


def record(stack: Stack, config: TraceConfig, during: Callable[[], None]) -> bytes:
    """Runs a session with `config` around `during()` and returns the trace."""
    recorder = Recorder(stack.consumer)
    try:
        try:
            recorder.start(config)
        except HeapprofdError as exc:
            raise AssertionError(f"{exc}\n{stack.logs()}") from exc
        during()
        return recorder.stop()
    finally:
        recorder.close()


def config_for(pids: list[int], **options: Any) -> TraceConfig:
    interval = options.pop("interval", 4096)
    config = trace_config(pids[0] if pids else 0, interval, **options)
    heap = config.data_sources[0].config.heapprofd_config
    del heap.pid[:]
    heap.pid.extend(pids)
    return config


def iter_processes(dumps: list[HeapDump], pid: int) -> Iterator[HeapDump]:
    return (d for d in dumps if d.pid == pid)
