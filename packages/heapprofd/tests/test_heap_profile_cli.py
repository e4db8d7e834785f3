"""heap_profile as a user runs it: one command, a trace, clear errors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from heapprofd import HeapprofdError
from heapprofd._heap_profile import _start_notified
from hp_testlib import heap_dumps

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "heap_profile_example.py"


def _heap_profile(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).with_name("heap_profile")
    argv = (
        [str(script)]
        if script.exists()
        else [
            sys.executable,
            "-c",
            "import sys; from heapprofd._heap_profile import main; sys.exit(main())",
        ]
    )
    return subprocess.run(
        [*argv, *args], check=False, cwd=cwd, env=env, capture_output=True, text=True, timeout=180
    )


def _private_env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PERFETTO_CONSUMER_SOCK_NAME"] = str(tmp_path / "no-traced-here")
    env.pop("PERFETTO_PRODUCER_SOCK_NAME", None)
    env.pop("PERFETTO_HEAPPROFD_SOCK_NAME", None)
    return env


def test_the_example_is_recorded_in_one_command(tmp_path: Path) -> None:
    result = _heap_profile(
        "-o",
        "heap.pftrace",
        "--all-heaps",
        "--",
        str(EXAMPLE),
        cwd=tmp_path,
        env=_private_env(tmp_path),
    )
    assert result.returncode == 0, result.stderr
    assert "heap.pftrace" in result.stdout
    assert "ui.perfetto.dev" in result.stdout
    dumps = {d.heap_name: d for d in heap_dumps((tmp_path / "heap.pftrace").read_bytes())}
    assert set(dumps) == {"python", "connection_pool"}
    cache = dumps["python"].totals("load_cache")
    expected = 10_000 * (1024 + 33)  # each bytes object: 33 bytes of header and the data
    assert 0.8 * expected < cache["allocated"] - cache["freed"] < 1.25 * expected
    requests = dumps["python"].totals("handle_requests")
    assert requests["freed"] >= 0.95 * requests["allocated"] > 0
    assert dumps["connection_pool"].totals("open_connections")["allocated"] == 64 * 64 * 1024


def test_mistakes_get_one_line_and_status_1(tmp_path: Path) -> None:
    env = _private_env(tmp_path)
    for args in (["--", "missing.py"], [], ["-i", "0", "--", str(EXAMPLE)]):
        result = _heap_profile(*args, cwd=tmp_path, env=env)
        assert result.returncode == 1
        assert len(result.stderr.strip().splitlines()) == 1
        assert result.stderr.startswith("heap_profile: ")
    assert not list(tmp_path.iterdir())


def test_a_helper_that_fails_to_start_is_named_with_its_whole_error(tmp_path: Path) -> None:
    long_path = "/".join(["", *["directory"] * 40, "_native.so"])
    error = f"ImportError: {long_path}: cannot open shared object file"
    program = (
        "import sys; sys.stderr.write('Traceback (most recent call last):\\n'"
        f" + '  File \"x.py\", line 1\\n' * 20 + {error!r} + '\\n'); sys.exit(1)"
    )
    with pytest.raises(HeapprofdError) as info:
        _start_notified([sys.executable, "-c", program], dict(os.environ), "TEST_NOTIFY_FD")
    assert str(info.value).endswith(f" did not start: {error}")
