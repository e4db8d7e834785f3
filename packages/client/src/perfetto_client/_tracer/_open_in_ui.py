"""`perfetto-trace open FILE` and `run --open`: serve one trace once to ui.perfetto.dev.

As upstream's `tools/open_trace_in_ui`: an HTTP server on 127.0.0.1 (port 9001, the one the
UI is allowed to fetch from) that serves only that file, with the CORS header the UI needs
and `Cache-Control: no-cache`, and stops once the file has been fetched whole. Unlike
upstream's, it serves each connection on a thread of its own (one that sends nothing times
out and holds up no other), answers only requests addressed to 127.0.0.1 or localhost on its
port and, when they say where they come from, coming from the UI (so a web page that rebinds
its own name to 127.0.0.1 gets nothing), and first checks that the file is a trace, as
`perfetto-trace report` does.
"""

from __future__ import annotations

import http.server
import os
import shutil
import subprocess
import sys
import urllib.parse
from typing import Any, TextIO

from perfetto_client._tracer._options import DEFAULT_UI_PORT
from perfetto_client._tracer._report import ReportError, read_trace

__all__ = ["IDLE_TIMEOUT_S", "NO_BROWSER_ENV", "UI_ORIGIN", "serve_once", "ui_link"]

UI_ORIGIN = "https://ui.perfetto.dev"
NO_BROWSER_ENV = "PERFETTO_TRACE_NO_BROWSER"
"""Set (to anything but empty) in the environment: the link is printed, no browser is started."""
IDLE_TIMEOUT_S = 10.0
"""A connection that sends nothing (or takes no data) for this long is closed."""


def ui_link(name: str, port: int) -> str:
    """The ui.perfetto.dev address that makes the UI fetch `name` from 127.0.0.1:`port`."""
    return f"{UI_ORIGIN}/#!/?url=http://127.0.0.1:{port}/{urllib.parse.quote(name)}"


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True  # a connection still open when the file went out does not hold it up

    def __init__(self, port: int, path: str, size: int) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.trace_path = path
        self.size = size
        self.request_path = "/" + urllib.parse.quote(os.path.basename(path))
        self.hosts = {f"127.0.0.1:{port}", f"localhost:{port}"}

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A fetch that broke off is not a fetch: the file is served again, quietly."""


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server
    timeout = IDLE_TIMEOUT_S

    def end_headers(self) -> None:
        self.send_header("Access-Control-Allow-Origin", UI_ORIGIN)
        self.send_header("Cache-Control", "no-cache")
        super().end_headers()

    def _refused(self) -> bool:
        """Answers 403 or 404 to a request for anything but the file from here or the UI."""
        host = (self.headers.get("Host") or "").lower()
        origin = self.headers.get("Origin")
        if host not in self.server.hosts or (origin is not None and origin != UI_ORIGIN):
            self.send_error(403, "Forbidden")
            return True
        if self.path != self.server.request_path:
            self.send_error(404, "File not found")
            return True
        return False

    def _send_head(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(self.server.size))
        self.end_headers()

    def do_HEAD(self) -> None:
        if not self._refused():
            self._send_head()

    def do_GET(self) -> None:
        if self._refused():
            return
        with open(self.server.trace_path, "rb") as file:
            self._send_head()
            shutil.copyfileobj(file, self.wfile)
            self.wfile.flush()
        # The whole file went out (a reset connection raised above): serve_forever returns.
        self.server.shutdown()

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the command prints its own lines."""


def _browser_wanted() -> bool:
    """A browser is started when one can show a page: a desktop session, or BROWSER set."""
    if os.environ.get(NO_BROWSER_ENV):
        return False
    if os.environ.get("BROWSER") or sys.platform in {"darwin", "win32"}:
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def _start_browser(link: str) -> None:
    """Opens `link` with `webbrowser` in a detached process whose output goes nowhere, so that
    a browser that stays in the foreground or writes to the terminal neither blocks nor spews."""
    subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, webbrowser; webbrowser.open_new_tab(sys.argv[1])",
            link,
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def serve_once(path: str, port: int = DEFAULT_UI_PORT, err: TextIO | None = None) -> int:
    """Serves the trace at `path` on 127.0.0.1:`port` until ui.perfetto.dev has fetched it.

    Returns the exit status: 0 once fetched, 1 when the file is not a trace `perfetto-trace
    report` can read or the port cannot be used, 130 on Ctrl-C. Every line it prints starts
    with `perfetto-trace: `.
    """
    err = sys.stderr if err is None else err
    try:
        size = os.path.getsize(path)
        with open(path, "rb"):
            pass
    except OSError as exc:
        print(f"perfetto-trace: cannot open {path}: {exc.strerror}", file=err)
        return 1
    try:
        read_trace(path, 1)
    except ReportError as exc:
        print(f"perfetto-trace: {exc}", file=err)
        return 1
    try:
        server = _Server(port, path, size)
    except OSError as exc:
        print(
            f"perfetto-trace: cannot serve on 127.0.0.1:{port}: {exc.strerror} "
            "(another trace being opened? choose another --port)",
            file=err,
        )
        return 1
    link = ui_link(os.path.basename(path), port)
    with server:
        print(f"perfetto-trace: open {link}", file=err)
        if _browser_wanted():
            _start_browser(link)
        else:
            print(
                "perfetto-trace: no browser to start here: open that link in one on this machine",
                file=err,
            )
        try:  # from before the line that tells a person (or a test) that Ctrl-C stops it
            print(
                f"perfetto-trace: serving {path} once on 127.0.0.1:{port} (Ctrl-C to stop)",
                file=err,
                flush=True,
            )
            server.serve_forever()
        except KeyboardInterrupt:
            print(f"perfetto-trace: stopped before {path} was fetched", file=err)
            return 130
    print(f"perfetto-trace: {path} was fetched ({size} bytes)", file=err)
    return 0
