"""The child processes a test starts: daemons that say when they are ready, and their end."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from perfetto_testing._wait import TIMEOUT, wait_for


def end_process(
    process: subprocess.Popen[Any], sig: int = signal.SIGTERM, timeout: float = TIMEOUT
) -> int:
    """Sends `sig` to `process` if it still runs, waits up to `timeout` for it to exit, kills it
    if it has not, and reaps it; returns its exit status. Its pipes stay open for the caller
    (and its reader threads) to drain and close."""
    if process.poll() is None:
        process.send_signal(sig)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    return process.returncode


class NotifyingDaemon:
    """`name`, a daemon subprocess that says it is ready by writing `1` to the fd its
    environment variable `notify_env` names (traced's TRACED_NOTIFY_FD); the constructor
    returns once it has, and fails the test (naming the daemon, with its log) if it has not
    within TIMEOUT. Its stderr, its log, is collected line by line into `log` so that the pipe
    never fills up. `with` (or `close`) ends it (SIGTERM, then SIGKILL after the limit) and
    closes its pipes."""

    def __init__(
        self,
        name: str,
        command: Sequence[str],
        env: Mapping[str, str],
        notify_env: str,
        *,
        cwd: str | Path | None = None,
        stdout: int | None = subprocess.PIPE,
    ) -> None:
        self.name = name
        env = dict(env)
        read_end, write_end = os.pipe()
        env[notify_env] = str(write_end)
        self.process = subprocess.Popen(
            command,
            env=env,
            cwd=cwd,
            pass_fds=(write_end,),
            stdout=stdout,
            stderr=subprocess.PIPE,
        )
        os.close(write_end)
        self.log: list[str] = []
        self._log_reader = threading.Thread(target=self._read_log, daemon=True)
        self._log_reader.start()
        try:
            ready, _, _ = select.select([read_end], [], [], TIMEOUT)
            if not ready or os.read(read_end, 1) != b"1":
                self.process.kill()
                self.process.wait(TIMEOUT)
                self._log_reader.join(TIMEOUT)
                raise AssertionError(f"{self.name} did not start: " + "\n".join(self.log))
        finally:
            os.close(read_end)

    def _read_log(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.log.append(line.decode(errors="replace").rstrip("\n"))

    @property
    def pid(self) -> int:
        return self.process.pid

    def wait_log(self, text: str) -> None:
        """Waits until a line of the log contains `text`."""
        wait_for(lambda: any(text in line for line in self.log), TIMEOUT, repr(text))

    def wait(self) -> int:
        """Waits for the daemon to exit by itself (and for its whole log); its exit status."""
        status = self.process.wait(TIMEOUT)
        self._log_reader.join(TIMEOUT)
        return status

    def stop(self) -> int:
        """SIGTERM, then waits (SIGKILL after the limit); returns the exit status."""
        return end_process(self.process)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Ends the daemon (as `stop`), reads the rest of its log and closes its pipes."""
        self.stop()
        self._log_reader.join(TIMEOUT)
        for pipe in (self.process.stdout, self.process.stderr):
            if pipe is not None:
                pipe.close()
