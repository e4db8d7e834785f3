"""Which processes a HeapprofdConfig targets."""

from __future__ import annotations

import signal
import subprocess
import sys

from heapprofd._process_matcher import (
    PROFILING_SIGNAL,
    cmdline_matches,
    has_profiling_handler,
    read_cmdline,
)


def test_upstream_rules_basename_or_full_path_globs() -> None:
    assert cmdline_matches(["traced"], ["/usr/bin/traced", "--background"])
    assert cmdline_matches(["trace*"], ["/usr/bin/traced"])
    assert cmdline_matches(["/usr/bin/traced"], ["/usr/bin/traced"])
    assert not cmdline_matches(["/bin/traced"], ["/usr/bin/traced"])
    assert not cmdline_matches(["other"], ["/usr/bin/traced"])


def test_python_programs_match_by_script_or_module() -> None:
    assert cmdline_matches(["app.py"], ["/usr/bin/python3", "-X", "dev", "/srv/app.py", "-v"])
    assert cmdline_matches(["/srv/*.py"], ["python3", "/srv/app.py"])
    assert cmdline_matches(["http.server"], ["python3.11", "-m", "http.server", "80"])
    assert cmdline_matches(["app.py"], ["python3", "-m", "heapprofd", "run", "--", "app.py"])
    assert cmdline_matches(["app.py"], ["/venv/bin/heapprofd", "run", "app.py"])
    assert not cmdline_matches(["app.py"], ["python3", "-c", "app.py"])


def test_only_processes_with_the_client_handler_are_signalled() -> None:
    plain = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    code = (
        "import signal, sys, time; "
        f"signal.signal({PROFILING_SIGNAL}, lambda *a: None); print('ok', flush=True); "
        "time.sleep(60)"
    )
    handled = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    try:
        assert handled.stdout is not None
        assert handled.stdout.readline() == b"ok\n"
        assert has_profiling_handler(handled.pid)
        assert not has_profiling_handler(plain.pid)
        argv = read_cmdline(plain.pid)
        assert argv is not None
        assert argv[0] == sys.executable
    finally:
        for process in (plain, handled):
            process.send_signal(signal.SIGKILL)
            process.wait()
            if process.stdout is not None:
                process.stdout.close()
    assert read_cmdline(2**22 + 1) is None
