"""Record a program, read its report on the console, and fetch the trace as ui.perfetto.dev would.

python examples/report_and_open.py out.pftrace

The same three steps a person types:
    perfetto-trace run -o out.pftrace examples/fib.py
    perfetto-trace report out.pftrace --limit 5
    perfetto-trace open out.pftrace        (then the UI fetches it from 127.0.0.1:9001)
Here the UI's fetch is made with urllib, and no browser is started (PERFETTO_TRACE_NO_BROWSER).
"""

import os
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

UI_ORIGIN = "https://ui.perfetto.dev"


def perfetto_trace() -> str:
    """The `perfetto-trace` command installed beside this interpreter."""
    return str(Path(sys.executable).with_name("perfetto-trace"))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def fetch_as_the_ui(trace: str) -> None:
    environment = {**os.environ, "PERFETTO_TRACE_NO_BROWSER": "1"}
    port = str(free_port())
    server = subprocess.Popen(
        [perfetto_trace(), "open", "--port", port, trace],
        stderr=subprocess.PIPE,
        text=True,
        env=environment,
    )
    try:
        assert server.stderr is not None  # perfetto-trace says where it serves on stderr
        link = next(line for line in server.stderr if "ui.perfetto.dev/#!/?url=" in line)
        url = link.split("?url=", 1)[1].strip()
        request = urllib.request.Request(url, headers={"Origin": UI_ORIGIN})
        with urllib.request.urlopen(request, timeout=60) as response:
            body = response.read()
            allowed = response.headers["Access-Control-Allow-Origin"]
        print(f"the UI fetched {len(body):,} bytes from {url} (allowed origin: {allowed})")
        assert body == Path(trace).read_bytes()
        assert server.wait(timeout=60) == 0  # served once, then it exits
    finally:
        server.kill()
        server.wait()


def main(trace: str) -> None:
    program = str(Path(__file__).with_name("fib.py"))
    subprocess.run([perfetto_trace(), "run", "-q", "-o", trace, program], check=True)
    subprocess.run([perfetto_trace(), "report", trace, "--limit", "5"], check=True)
    fetch_as_the_ui(trace)


if __name__ == "__main__":
    main(sys.argv[1])
