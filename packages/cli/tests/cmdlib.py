"""Helpers for the perfetto command's tests: traced, producers and the command, as processes."""

from __future__ import annotations

import os
import select
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from perfetto_testing import TIMEOUT, NotifyingDaemon

BIN = Path(sys.executable).parent
PRODUCER_MAIN = str(Path(__file__).with_name("producer_main.py"))


class Traced(NotifyingDaemon):
    """Our traced (given `args`) on socket paths under `directory`; `env` points clients at it."""

    def __init__(self, directory: Path, *args: str) -> None:
        self.producer_socket = str(directory / "producer.sock")
        self.consumer_socket = str(directory / "consumer.sock")
        self.env = dict(os.environ)
        self.env["PERFETTO_PRODUCER_SOCK_NAME"] = self.producer_socket
        self.env["PERFETTO_CONSUMER_SOCK_NAME"] = self.consumer_socket
        self.commands: list[subprocess.Popen[bytes]] = []
        super().__init__(
            "traced",
            [str(BIN / "traced"), *args],
            self.env,
            "TRACED_NOTIFY_FD",
            stdout=subprocess.DEVNULL,
        )

    def stop(self) -> int:
        """Ends the commands started on it that still run, then traced; its exit status."""
        for command in self.commands:
            if command.poll() is None:
                command.kill()
            command.wait()
            for stream in (command.stdout, command.stderr):
                if stream is not None:
                    stream.close()
        return super().stop()

    def stopped_log(self) -> str:
        """Stops traced (and its commands) and returns its whole log."""
        self.close()
        return "\n".join(self.log)


class Producer:
    """A producer_main.py process registering `data_source`."""

    def __init__(
        self,
        traced: Traced,
        data_source: str = "test.ds",
        count: int = 10,
        extra: int = 0,
        payload: int = 0,
    ) -> None:
        """`extra` more data sources are registered too, named `data_source`.0, .1, ...;
        each packet carries `payload` bytes (0: the word "payload")."""
        argv = [sys.executable, PRODUCER_MAIN, traced.producer_socket, data_source, str(count)]
        argv += [str(extra), str(payload)] if payload else [str(extra)]
        self.process = subprocess.Popen(
            argv,
            env=traced.env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        self._pending = b""
        try:
            self.wait_for("CONNECTED")
        except BaseException:
            self.process.kill()
            self.stop()
            raise

    def wait_for(self, prefix: str) -> str:
        """The next stdout line starting with `prefix` (fails on EOF or after TIMEOUT)."""
        assert self.process.stdout is not None
        fd = self.process.stdout.fileno()
        while True:
            line, newline, rest = self._pending.partition(b"\n")
            if newline:
                self._pending = rest
                if line.decode().startswith(prefix):
                    return line.decode()
                continue
            ready, _, _ = select.select([fd], [], [], TIMEOUT)
            assert ready, f"producer: no {prefix!r} line in time"
            chunk = os.read(fd, 65536)
            assert chunk, f"producer exited before printing {prefix!r}"
            self._pending += chunk

    def stop(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            self.process.wait(TIMEOUT)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()


def perfetto(
    traced: Traced | None, *args: str, input: bytes | None = None, command: str = "perfetto"
) -> subprocess.CompletedProcess[bytes]:
    """Runs the installed command to completion."""
    env = traced.env if traced is not None else dict(os.environ)
    return subprocess.run(
        [str(BIN / command), *args],
        env=env,
        input=input,
        capture_output=True,
        timeout=TIMEOUT,
        check=False,
    )


def start_perfetto(traced: Traced, *args: str, **kwargs: Any) -> subprocess.Popen[bytes]:
    """Starts the installed command and returns at once; `traced.stop()` ends it if need be."""
    command = subprocess.Popen(
        [str(BIN / "perfetto"), *args],
        env=traced.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        **kwargs,
    )
    traced.commands.append(command)
    return command


def packet_kinds(trace: Any) -> Counter[str]:
    """How many packets of each kind (the TracePacket `data` oneof) the trace holds."""
    return Counter(p.WhichOneof("data") for p in trace.packet)


def test_values(trace: Any) -> list[int]:
    """The for_testing.seq_value of every TestEvent packet, in order."""
    return [p.for_testing.seq_value for p in trace.packet if p.HasField("for_testing")]


test_values.__test__ = False  # type: ignore[attr-defined]
