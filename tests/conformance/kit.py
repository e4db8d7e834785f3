"""The processes of the conformance kit: a version's `traced` and its agents."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from perfetto_testing import TIMEOUT, NotifyingDaemon

AGENT = str(Path(__file__).with_name("agent.py"))
VERSIONS_ENV = "PERFETTO_CONFORMANCE_VERSIONS"


@dataclass(frozen=True)
class Version:
    """One installed version: the interpreter of its environment."""

    name: str
    python: str

    @cached_property
    def traits(self) -> dict[str, Any]:
        """What the version installs (`agent.py probe`)."""
        output = subprocess.run(
            [self.python, AGENT, "probe"], check=True, capture_output=True, text=True
        ).stdout
        return dict(json.loads(output.split(" ", 1)[1]))

    @property
    def traced(self) -> str:
        """The `traced` console script of the version's environment."""
        return str(Path(self.python).parent / "traced")

    def __str__(self) -> str:
        return f"{self.name} (perfetto-service {self.traits['service']})"


def versions() -> list[Version]:
    """The versions under test: PERFETTO_CONFORMANCE_VERSIONS, else this environment."""
    spec = os.environ.get(VERSIONS_ENV) or f"current={sys.executable}"
    pairs = (item.split("=", 1) for item in spec.split(",") if item)
    return [Version(name, python) for name, python in pairs]


class Traced(NotifyingDaemon):
    """A version's `traced` on sockets under `directory`, until the block ends."""

    def __init__(self, version: Version, directory: Path) -> None:
        self.producer_socket = str(directory / "producer.sock")
        self.consumer_socket = str(directory / "consumer.sock")
        env = dict(os.environ)
        env["PERFETTO_PRODUCER_SOCK_NAME"] = self.producer_socket
        env["PERFETTO_CONSUMER_SOCK_NAME"] = self.consumer_socket
        super().__init__(
            f"traced of {version}", [version.traced], env, "TRACED_NOTIFY_FD", stdout=None
        )


class Agent:
    """`agent.py COMMAND ARGS` run by a version's interpreter; its lines are collected."""

    def __init__(self, version: Version, *args: str, env: dict[str, str] | None = None) -> None:
        self.version = version
        self.process = subprocess.Popen(
            [version.python, AGENT, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, **(env or {})},
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.strip())

    def wait_line(self, prefix: str, count: int = 1) -> list[str]:
        """Waits until `count` lines start with `prefix`; returns them."""
        deadline = time.monotonic() + TIMEOUT
        while True:
            found = [line for line in self.lines if line.startswith(prefix)]
            if len(found) >= count:
                return found
            if time.monotonic() > deadline or (
                self.process.poll() is not None and not self._reader.is_alive()
            ):
                raise AssertionError(
                    f"agent of {self.version} {self.process.args!r}: no {count}x {prefix!r} "
                    f"in {self.lines}"
                )
            time.sleep(0.01)

    def send(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def close(self) -> None:
        if self.process.poll() is None and self.process.stdin is not None:
            try:
                self.process.stdin.close()
                self.process.wait(TIMEOUT)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
        self.process.kill()
        self.process.wait(TIMEOUT)
        self._reader.join(TIMEOUT)
        if self.process.stdout is not None:
            self.process.stdout.close()
