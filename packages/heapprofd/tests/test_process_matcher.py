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


def test_heapprofd_run_as_a_console_script_matches_its_program() -> None:
    # `heapprofd run victim.py`: the console script runs under the interpreter of its shebang
    assert cmdline_matches(
        ["victim.py"], ["/venv/bin/python", "/venv/bin/heapprofd", "run", "victim.py"]
    )
    assert cmdline_matches(["victim.py"], ["python3", "/v/bin/heapprofd", "run", "--", "victim.py"])
    assert cmdline_matches(["tool"], ["python3", "/v/bin/heapprofd", "run", "-m", "tool", "x"])
    assert cmdline_matches(["heapprofd"], ["python3", "/v/bin/heapprofd", "run", "victim.py"])
    assert not cmdline_matches(["victim.py"], ["python3", "/v/bin/heapprofd", "victim.py"])
    assert not cmdline_matches(["victim.py"], ["python3", "/v/bin/other", "run", "victim.py"])


def test_python_options_are_read_as_python_reads_them() -> None:
    assert cmdline_matches(["app.py"], ["python3", "-Bu", "app.py"])
    assert cmdline_matches(["app.py"], ["python3", "-Wignore", "-Xdev", "app.py"])
    assert cmdline_matches(["app.py"], ["python3", "-W", "ignore", "--", "app.py"])
    assert cmdline_matches(["http.server"], ["python3", "-mhttp.server"])
    assert cmdline_matches(["http.server"], ["python3", "-Im", "http.server"])
    assert not cmdline_matches(["app.py"], ["python3", "-Ic", "app.py"])
    assert not cmdline_matches(["app.py"], ["python3", "-", "app.py"])
    assert not cmdline_matches(["ignore"], ["python3", "-W", "ignore"])


def test_a_relative_script_matches_an_absolute_pattern_in_its_directory() -> None:
    assert cmdline_matches(["/srv/app.py"], ["python3", "app.py"], "/srv")
    assert cmdline_matches(["/srv/app.py"], ["python3", "../srv/./app.py"], "/home")
    assert not cmdline_matches(["/srv/app.py"], ["python3", "app.py"], "/home")
    assert not cmdline_matches(["/srv/http.server"], ["python3", "-m", "http.server"], "/srv")
    # argv0 keeps upstream's rule: the first argument as it is
    assert not cmdline_matches(["/usr/bin/traced"], ["traced"], "/usr/bin")


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
