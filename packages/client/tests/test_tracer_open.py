"""`perfetto-trace open FILE` and `run --open`: the trace served once on 127.0.0.1, fetched
with urllib as ui.perfetto.dev fetches it. No real browser ever starts: BROWSER names a
script that writes down the address it was given, or PERFETTO_TRACE_NO_BROWSER=1."""

from __future__ import annotations

import http.client
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from tracer_support import BIN, decode, end, sigint_reaches_children

PERFETTO_TRACE = str(BIN / "perfetto-trace")
LINK = "https://ui.perfetto.dev/#!/?url=http://127.0.0.1:{port}/{name}"
UI_ORIGIN = "https://ui.perfetto.dev"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in {"DISPLAY", "WAYLAND_DISPLAY"}}
    env.pop("BROWSER", None)
    env.pop("PERFETTO_TRACE_NO_BROWSER", None)
    return {**env, **extra}


def _start(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [PERFETTO_TRACE, *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _until_serving(proc: subprocess.Popen[str]) -> list[str]:
    """perfetto-trace's stderr lines up to the one saying that it serves."""
    assert proc.stderr is not None
    lines: list[str] = []
    while True:
        line = proc.stderr.readline()
        assert line, f"perfetto-trace ended before serving: {lines}"
        lines.append(line.rstrip("\n"))
        if "serving" in line:
            return lines


def _get(url: str) -> Any:
    return urllib.request.urlopen(url, timeout=60)


def _fake_browser(tmp_path: Path) -> tuple[Path, Path]:
    """An executable that writes the address it is given to a file, as BROWSER."""
    seen = tmp_path / "browser-got"
    script = tmp_path / "fake-browser"
    script.write_text(
        f"#!{sys.executable}\nimport sys\nopen({str(seen)!r}, 'w').write(sys.argv[1])\n"
    )
    script.chmod(0o755)
    return script, seen


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A trace perfetto-trace wrote (about 600 KB), made once for the module."""
    folder = tmp_path_factory.mktemp("recorded")
    (folder / "prog.py").write_text("for i in range(20_000):\n    abs(i)\n")
    subprocess.run(
        [PERFETTO_TRACE, "run", "-q", "-o", "out.pftrace", "prog.py"],
        cwd=folder,
        check=True,
        timeout=120,
    )
    return folder / "out.pftrace"


@pytest.fixture
def trace(tmp_path: Path, recorded: Path) -> Path:
    path = tmp_path / "my trace.pftrace"
    shutil.copyfile(recorded, path)
    return path


def _request(
    port: int, method: str, path: str, headers: dict[str, str]
) -> tuple[int, http.client.HTTPMessage, bytes]:
    """Sends one request with exactly `headers` (Host included); the status, headers and the
    bytes that came after the headers until the server closed the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=60) as conn:
        lines = [f"{method} {path} HTTP/1.1", *(f"{k}: {v}" for k, v in headers.items())]
        conn.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        response = http.client.HTTPResponse(conn)
        response.begin()
        assert response.fp is not None
        return response.status, response.headers, response.fp.read()


def test_open_serves_the_file_once_with_the_uis_headers(tmp_path: Path, trace: Path) -> None:
    port = _free_port()
    browser, seen = _fake_browser(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    proc = _start(["open", "--port", str(port), str(trace)], elsewhere, _env(BROWSER=str(browser)))
    try:
        lines = _until_serving(proc)
        link = LINK.format(port=port, name="my%20trace.pftrace")
        assert f"perfetto-trace: open {link}" in lines
        url = link.split("url=", 1)[1]
        for other in ("/", "/x.pftrace", "/../my%20trace.pftrace", "/my%20trace.pftrace/"):
            with pytest.raises(urllib.error.HTTPError) as err:
                _get(f"http://127.0.0.1:{port}{other}")
            assert err.value.code == 404
        with _get(url) as response:
            body = response.read()
            headers = response.headers
        assert body == trace.read_bytes()
        assert headers["Access-Control-Allow-Origin"] == "https://ui.perfetto.dev"
        assert headers["Cache-Control"] == "no-cache"
        assert proc.wait(timeout=60) == 0
        assert proc.stderr is not None
        rest = proc.stderr.read()
        assert f"was fetched ({trace.stat().st_size} bytes)" in rest
        deadline = time.monotonic() + 60
        while not seen.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert seen.read_text() == link  # webbrowser started BROWSER with the link
        with pytest.raises(urllib.error.URLError):
            _get(url)  # served once: nothing listens any more
    finally:
        end(proc)


def test_without_a_browser_the_link_is_printed_and_the_file_still_served(
    tmp_path: Path, trace: Path
) -> None:
    port = _free_port()
    browser, seen = _fake_browser(tmp_path)
    for env in (_env(), _env(BROWSER=str(browser), PERFETTO_TRACE_NO_BROWSER="1")):
        proc = _start(["open", "--port", str(port), str(trace)], tmp_path, env)
        try:
            lines = _until_serving(proc)
            assert any("no browser to start here" in line for line in lines)
            with _get(f"http://127.0.0.1:{port}/my%20trace.pftrace") as response:
                assert response.read() == trace.read_bytes()
            assert proc.wait(timeout=60) == 0
        finally:
            end(proc)
    assert not seen.exists()


def test_a_busy_port_is_one_line_and_exit_1(tmp_path: Path, trace: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = subprocess.run(
            [PERFETTO_TRACE, "open", "--port", str(port), str(trace)],
            capture_output=True,
            text=True,
            timeout=120,
            env=_env(PERFETTO_TRACE_NO_BROWSER="1"),
            check=False,
        )
    assert proc.returncode == 1
    assert proc.stderr == (
        f"perfetto-trace: cannot serve on 127.0.0.1:{port}: Address already in use "
        "(another trace being opened? choose another --port)\n"
    )


def test_a_missing_file_is_one_line_and_exit_1(tmp_path: Path) -> None:
    proc = subprocess.run(
        [PERFETTO_TRACE, "open", str(tmp_path / "nope.pftrace")],
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(PERFETTO_TRACE_NO_BROWSER="1"),
        check=False,
    )
    assert proc.returncode == 1
    assert proc.stderr.count("\n") == 1
    assert "cannot open" in proc.stderr
    assert "No such file or directory" in proc.stderr


def test_ctrl_c_stops_serving_with_one_line_and_exit_130(tmp_path: Path, trace: Path) -> None:
    port = _free_port()
    with sigint_reaches_children():
        proc = _start(
            ["open", "--port", str(port), str(trace)], tmp_path, _env(PERFETTO_TRACE_NO_BROWSER="1")
        )
    try:
        _until_serving(proc)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 130
        assert proc.stderr is not None
        assert proc.stderr.read() == f"perfetto-trace: stopped before {trace} was fetched\n"
    finally:
        end(proc)


def test_run_open_records_then_serves_the_trace(tmp_path: Path) -> None:
    port = _free_port()
    script = tmp_path / "prog.py"
    script.write_text("def work():\n    return sum(range(10))\n\nwork()\nraise SystemExit(3)\n")
    out = tmp_path / "out.pftrace"
    proc = _start(
        ["run", "--open", "--port", str(port), "-o", str(out), str(script)],
        tmp_path,
        _env(PERFETTO_TRACE_NO_BROWSER="1"),
    )
    try:
        lines = _until_serving(proc)
        assert any(line.startswith("perfetto-trace: wrote") for line in lines)
        assert f"perfetto-trace: open {LINK.format(port=port, name='out.pftrace')}" in lines
        with _get(f"http://127.0.0.1:{port}/out.pftrace") as response:
            served = response.read()
        assert proc.wait(timeout=60) == 3  # the program's exit status
    finally:
        end(proc)
    fetched = tmp_path / "fetched.pftrace"
    fetched.write_bytes(served)
    [thread] = decode(fetched).threads.values()
    assert "work" in thread.names()


def test_run_open_does_not_go_with_system(tmp_path: Path) -> None:
    (tmp_path / "prog.py").write_text("pass\n")
    proc = subprocess.run(
        [PERFETTO_TRACE, "run", "--open", "--system", "prog.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 1
    assert (
        proc.stderr == "perfetto-trace: --open does not go with --system (traced has the trace)\n"
    )


def test_run_open_does_not_serve_an_incomplete_trace(tmp_path: Path) -> None:
    (tmp_path / "prog.py").write_text("for i in range(100_000):\n    abs(i)\n")
    port = str(_free_port())
    proc = subprocess.run(
        [PERFETTO_TRACE, "run", "--open", "--port", port, "-o", "/dev/full", "prog.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(PERFETTO_TRACE_NO_BROWSER="1"),
        check=False,
    )
    assert proc.returncode == 0  # the program's
    assert "recording stopped: writing /dev/full" in proc.stderr
    assert "serving" not in proc.stderr
    assert "ui.perfetto.dev" not in proc.stderr


def test_an_idle_connection_does_not_hold_up_the_fetch(tmp_path: Path, trace: Path) -> None:
    port = _free_port()
    proc = _start(
        ["open", "--port", str(port), str(trace)], tmp_path, _env(PERFETTO_TRACE_NO_BROWSER="1")
    )
    idle: list[socket.socket] = []
    try:
        _until_serving(proc)
        for i in range(12):  # more than the listen backlog that used to fill up
            conn = socket.create_connection(("127.0.0.1", port), timeout=60)
            if i % 2:
                conn.sendall(b"GET /my%20trace.pftrace HTTP/1.1\r\n")  # and never the rest
            idle.append(conn)
        started = time.monotonic()
        with urllib.request.urlopen(
            f"http://127.0.0.1:{port}/my%20trace.pftrace", timeout=20
        ) as response:
            assert response.read() == trace.read_bytes()
        assert time.monotonic() - started < 20
        assert proc.wait(timeout=60) == 0
    finally:
        for conn in idle:
            conn.close()
        end(proc)


def test_only_the_uis_requests_to_this_host_are_served(tmp_path: Path, trace: Path) -> None:
    port = _free_port()
    proc = _start(
        ["open", "--port", str(port), str(trace)], tmp_path, _env(PERFETTO_TRACE_NO_BROWSER="1")
    )
    name = "/my%20trace.pftrace"
    here = f"127.0.0.1:{port}"
    refused = [
        {"Host": f"attacker.example:{port}"},  # a page that rebound its name to 127.0.0.1
        {"Host": f"attacker.example:{port}", "Origin": f"http://attacker.example:{port}"},
        {"Host": "127.0.0.1"},
        {"Host": f"127.0.0.1:{port + 1}"},
        {},
        {"Host": here, "Origin": "https://attacker.example"},
        {"Host": here, "Origin": "null"},
    ]
    try:
        _until_serving(proc)
        for sent in refused:
            for method in ("GET", "HEAD"):
                status, _, body = _request(port, method, name, sent)
                assert status == 403, (method, sent)
                assert trace.read_bytes()[:1000] not in body
        assert proc.poll() is None  # refusing did not end the server
        status, headers, body = _request(
            port,
            "GET",
            name,
            {"Host": f"LOCALHOST:{port}", "Origin": UI_ORIGIN, "Connection": "close"},
        )
        assert status == 200
        assert body == trace.read_bytes()
        assert headers["Access-Control-Allow-Origin"] == "https://ui.perfetto.dev"
        assert proc.wait(timeout=60) == 0
    finally:
        end(proc)


def test_head_gives_the_headers_without_the_body(tmp_path: Path, trace: Path) -> None:
    port = _free_port()
    proc = _start(
        ["open", "--port", str(port), str(trace)], tmp_path, _env(PERFETTO_TRACE_NO_BROWSER="1")
    )
    host = {"Host": f"127.0.0.1:{port}", "Connection": "close"}
    try:
        _until_serving(proc)
        status, headers, body = _request(port, "HEAD", "/my%20trace.pftrace", host)
        assert status == 200
        assert body == b""
        assert headers["Content-Length"] == str(trace.stat().st_size)
        assert headers["Content-Type"] == "application/octet-stream"
        assert headers["Access-Control-Allow-Origin"] == "https://ui.perfetto.dev"
        assert headers["Cache-Control"] == "no-cache"
        assert _request(port, "HEAD", "/other.pftrace", host)[0] == 404
        assert proc.poll() is None  # a HEAD is not the fetch
        status, _, body = _request(port, "GET", "/my%20trace.pftrace", host)
        assert (status, body) == (200, trace.read_bytes())
        assert proc.wait(timeout=60) == 0
    finally:
        end(proc)


@pytest.mark.parametrize("first_byte", [0x0A, 0x42])
def test_a_file_that_is_not_a_trace_is_one_line_and_exit_1(tmp_path: Path, first_byte: int) -> None:
    noise = tmp_path / "noise.pftrace"
    # 0x0A passes the first byte that report checks: the rest must be decoded to tell.
    noise.write_bytes(bytes([first_byte]) + random.Random(30).randbytes(1 << 20))
    report = subprocess.run(
        [PERFETTO_TRACE, "report", str(noise)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    proc = subprocess.run(
        [PERFETTO_TRACE, "open", "--port", str(_free_port()), str(noise)],
        capture_output=True,
        text=True,
        timeout=60,
        env=_env(PERFETTO_TRACE_NO_BROWSER="1"),
        check=False,
    )
    assert report.returncode == 1
    assert proc.returncode == 1
    assert proc.stderr == report.stderr  # one verdict: report's
    assert proc.stderr.count("\n") == 1
    assert proc.stderr.startswith(f"perfetto-trace: {noise} is ")
    assert proc.stdout == ""
