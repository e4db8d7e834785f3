"""perfetto_testing.NotifyingDaemon, the start-up of every daemon the tests run."""

from __future__ import annotations

import os
import signal
import sys

import pytest
from perfetto_testing import NotifyingDaemon

NOTIFY = "HELPER_NOTIFY_FD"


def test_a_daemon_that_never_says_it_is_ready_fails_in_one_line_with_its_log() -> None:
    command = [sys.executable, "-c", "import sys; sys.exit('no socket here')"]
    with pytest.raises(AssertionError, match=r"^helper did not start: no socket here$"):
        NotifyingDaemon("helper", command, os.environ, NOTIFY)


def test_a_ready_daemon_runs_until_the_block_ends_and_its_log_is_kept() -> None:
    command = [
        sys.executable,
        "-c",
        "import os, sys, time\n"
        "print('listening', file=sys.stderr, flush=True)\n"
        f"os.write(int(os.environ['{NOTIFY}']), b'1')\n"
        "time.sleep(600)\n",
    ]
    with NotifyingDaemon("helper", command, os.environ, NOTIFY) as daemon:
        daemon.wait_log("listening")
        assert daemon.process.poll() is None
    assert daemon.process.returncode == -signal.SIGTERM
    assert daemon.log == ["listening"]
    assert daemon.process.stderr is not None
    assert daemon.process.stderr.closed
